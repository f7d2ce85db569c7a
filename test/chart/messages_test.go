package chart

import (
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// TestChartSaysWhatTheCLISays: a value the binary refuses fails the render
// in the binary's words (the field, the value, why and what to use), not
// JSON schema's ("'allOf' failed / 'not' failed"), and a key under the
// wrong parent names the parent that has it, through real helm template
// (and install) and helm lint, which prints it.
func TestChartSaysWhatTheCLISays(t *testing.T) {
	helm, dir := helmAndChart(t)
	_, cliErr := contract.ParseCheckpointPath("/etc/ckpt")
	require.Error(t, cliErr)
	for _, tc := range []struct{ set, want string }{
		{"config.checkpoint.path=/etc/ckpt", `config.checkpoint.path: Invalid value: "/etc/ckpt": ` + cliErr.Error()},
		{"config.checkpoint.path=/lib64/ckpt", `config.checkpoint.path: Invalid value: "/lib64/ckpt": must not be under the system directory /lib; use e.g. /checkpoint`},
		{"rescheduler.maxReschedules=-1", "rescheduler.maxReschedules: unknown key; did you mean config.maxReschedules? rescheduler takes only: enabled"},
		{"rescheduler.nodeLostGrace=1m", "rescheduler.nodeLostGrace: unknown key; did you mean config.rescheduler.nodeLostGrace?"},
		{"config.clusterWide=true", "config.clusterWide: unknown key; did you mean clusterWide?"},
		{"maxReschedules=3", "maxReschedules: unknown key; did you mean config.maxReschedules?"},
		{"config.preStopTimeout=1m", "config.preStopTimeout: unknown key; did you mean config.checkpoint.preStopTimeout?"},
		{"bogus=1", "bogus: unknown key; the top level takes only: admissionPolicy, affinity,"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := Render(helm, dir, "trainguard", "trainguard-system", tc.set)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "'allOf' failed")
			// helm lint reports a template's fail as "[INFO] Fail: ..." and
			// exits 0 (helm template and install exit 1): it must say the same.
			out, _ := exec.Command(helm, "lint", "--strict", dir, "--set", tc.set).CombinedOutput()
			assert.Contains(t, string(out), "Fail: "+tc.want)
		})
	}
}

// TestValueKeysAreTheSchemas: trainguard.valueKeys (templates cannot read
// values.schema.json) lists exactly the schema's keys at each parent.
func TestValueKeysAreTheSchemas(t *testing.T) {
	tpl := chartFile(t, "templates/_config.tpl")
	m := regexp.MustCompile(`(?s)\{\{- define "trainguard.valueKeys" -\}\}\n(.*?)\{\{- end -\}\}`).FindSubmatch(tpl)
	require.NotNil(t, m, "trainguard.valueKeys in _config.tpl")
	var listed map[string][]string
	require.NoError(t, yaml.Unmarshal(m[1], &listed))

	for parent, keys := range listed {
		node := schemaAt(t, strings.ReplaceAll(parent, ".", "/"))
		var want []string
		for k := range node["properties"].(map[string]any) {
			want = append(want, k)
		}
		sort.Strings(want)
		assert.Equal(t, want, keys, "trainguard.valueKeys[%q] must list the schema's keys", parent)
		assert.True(t, slices.IsSorted(keys))
	}
	for _, parent := range []string{"", "config", "rescheduler"} {
		assert.Contains(t, listed, parent, "checkKeys refuses unknown keys here")
	}
}
