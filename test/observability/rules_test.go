package observability

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/test/chart"
)

// promtool is bin/promtool, from Debian's prometheus package by `make
// promtool` (hack/install-promtool.sh); make test installs it first.
func promtool(t *testing.T) string {
	t.Helper()
	root, err := chart.RepoRoot()
	require.NoError(t, err)
	bin := filepath.Join(root, "bin", "promtool")
	_, err = os.Stat(bin)
	require.NoError(t, err, "bin/promtool is missing: run `make promtool` (make test does it for you)")
	return bin
}

// rulesFile writes the rendered PrometheusRule's spec (a Prometheus rule
// file: {groups: [...]}) into dir and returns the alert names it defines.
func rulesFile(t *testing.T, objs []*unstructured.Unstructured, dir string) []string {
	t.Helper()
	rules := chart.OfKind(objs, "PrometheusRule")
	require.Len(t, rules, 1)
	spec, found, err := unstructured.NestedMap(rules[0].Object, "spec")
	require.NoError(t, err)
	require.True(t, found)
	raw, err := yaml.Marshal(spec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), raw, 0o600))
	var names []string
	for _, r := range ruleExprs(t, rules[0]) {
		names = append(names, r.alert)
	}
	sort.Strings(names)
	return names
}

type rule struct{ alert, expr string }

func ruleExprs(t *testing.T, pr *unstructured.Unstructured) []rule {
	t.Helper()
	groups, _, err := unstructured.NestedSlice(pr.Object, "spec", "groups")
	require.NoError(t, err)
	var out []rule
	for _, g := range groups {
		rs, _, err := unstructured.NestedSlice(g.(map[string]any), "rules")
		require.NoError(t, err)
		for _, r := range rs {
			m := r.(map[string]any)
			alert, _ := m["alert"].(string)
			expr, _ := m["expr"].(string)
			out = append(out, rule{alert: alert, expr: expr})
		}
	}
	return out
}

func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
	return string(out)
}

// The rendered alerts pass `promtool check rules` and their unit tests
// (testdata/rules_test.yaml), and every alert has at least one unit test.
func TestAlertRulesPromtool(t *testing.T) {
	dir := t.TempDir()
	alerts := rulesFile(t, render(t), dir)
	tests, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o600))

	out := runPromtool(t, dir, "check", "rules", "rules.yaml")
	t.Logf("promtool check rules: %s", out)
	out = runPromtool(t, dir, "test", "rules", "rules_test.yaml")
	t.Logf("promtool test rules: %s", out)

	tested := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+alertname: (\S+)`).FindAllStringSubmatch(string(tests), -1) {
		tested[m[1]] = true
	}
	for _, a := range alerts {
		assert.True(t, tested[a], "alert %s has no unit test in testdata/rules_test.yaml", a)
	}
	assert.Len(t, alerts, 8, "the alerts rendered with cert-manager and the ServiceMonitor on")
}

// Self-managed certificates export no expiry metric trainguard could test
// against, so that mode gets no certificate alert; without the
// ServiceMonitor there is no `up` series to alert on.
func TestAlertRulesPerMode(t *testing.T) {
	dir := t.TempDir()
	alerts := rulesFile(t, render(t, "certManager.enabled=false", "monitoring.serviceMonitor.enabled=false"), dir)
	assert.NotContains(t, alerts, "TrainguardCertificateExpiringSoon")
	assert.NotContains(t, alerts, "TrainguardDown")
	assert.Contains(t, alerts, "TrainguardCheckpointsNotSaved")
	runPromtool(t, dir, "check", "rules", "rules.yaml")
}
