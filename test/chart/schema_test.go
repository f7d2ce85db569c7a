package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// TestChartSchemaRefusesWhatWouldCrashLoop: values the binary or the
// kubelet would refuse only after install (a pod that cannot pull its image,
// a Deployment the API server rejects, `trainguard serve` exiting on its
// config file) fail `helm lint` and `helm template` (so `helm install`)
// instead, with an error naming the value's path.
func TestChartSchemaRefusesWhatWouldCrashLoop(t *testing.T) {
	helm, dir := helmAndChart(t)
	for _, tc := range []struct{ set, path string }{
		{"image.tag=v1:2", "/image/tag"},
		{"image.tag=-rc1", "/image/tag"},
		{"image.tag=" + strings.Repeat("a", 129), "/image/tag"},
		{"image.repository=GHCR.io/Trainguard/Trainguard", "/image/repository"},
		{"image.repository=ghcr.io/trainguard/trainguard:0.1.0", "/image/repository"},
		{"image.repository=", "/image/repository"},
		{"resources.limits.memory=lots", "/resources/limits/memory"},
		{"resources.requests.cpu=-100m", "/resources/requests/cpu"},
		{"resources.requests.cpu=-1", "/resources/requests/cpu"},
		{"resources.limits.memory=1 Gi", "/resources/limits/memory"},
		{"resources.requests.gpu_count=1", "propertyName"},
		{"config.faultScheduling=gracefull", "/config/faultScheduling"},
		{"config.faultScheduling=Grace", "/config/faultScheduling"},
		{"config.recoverStrategy=recovr", "/config/recoverStrategy"},
		{`config.recoverStrategy=recover\, dump`, "/config/recoverStrategy"},
		{`config.recoverStrategy=recover\,`, "/config/recoverStrategy"},
		{"config.checkpoint.claim=My_Claim", "/config/checkpoint/claim"},
		{"config.gpu.resourceName=nvidia gpu", "/config/gpu/resourceName"},
		{"config.agent.image=registry.example/agent:1:2", "/config/agent/image"},
		{"config.trainingContainer.names={Pytorch}", "/config/trainingContainer/names/0"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := Render(helm, dir, "trainguard", "trainguard-system", tc.set)
			require.Error(t, err, "helm template must refuse %s", tc.set)
			assert.Contains(t, err.Error(), "schema")
			assert.Contains(t, err.Error(), tc.path, "the error names the value")
			require.Error(t, Lint(helm, dir, "trainguard-system", tc.set), "helm lint must refuse %s", tc.set)
		})
	}
}

// TestChartSchemaAcceptsWhatTheBinaryAccepts: the tightened patterns still
// let through every form the binary and Kubernetes take.
func TestChartSchemaAcceptsWhatTheBinaryAccepts(t *testing.T) {
	helm, dir := helmAndChart(t)
	digest := "sha256:" + strings.Repeat("0", 64)
	for _, set := range [][]string{
		{"image.tag=0.1.0"}, {"image.tag=v0.1.0-rc.1_amd64"}, {"image.tag="},
		{"image.repository=registry.example.com:5000/platform/trainguard"}, {"image.repository=localhost/trainguard"},
		{"image.repository=trainguard"}, {"image.repository=registry.example.com/a__b/c--d/e.f"},
		{"resources.limits.memory=1Gi", "resources.requests.memory=512Mi"}, {"resources.requests.cpu=0.5"},
		{"resources.requests.cpu=250m"}, {"resources.limits.memory=1073741824"}, {"resources.limits.memory=1e9"},
		{"resources.limits.ephemeral-storage=1G"}, {"resources.limits.hugepages-2Mi=0"},
		{"config.faultScheduling=force"}, {"config.faultScheduling=off"},
		{`config.recoverStrategy=retry\,recover\,recover-in-place\,elastic-training\,dump\,exit`},
		{"config.checkpoint.claim=team-ckpt.v2"}, {"config.gpu.resourceName=huawei.com/Ascend910"},
		{"config.agent.image=registry.example.com:5000/agent:1@" + digest}, {"config.agent.image=agent@" + digest},
		{"config.trainingContainer.names={pytorch,trainer-0}"},
	} {
		t.Run(strings.Join(set, ","), func(t *testing.T) {
			objs, err := Render(helm, dir, "trainguard", "trainguard-system", set...)
			require.NoError(t, err)
			// And the binary accepts the policy file the chart renders from it.
			renderedConfig(t, objs, renderCase{fullname: "trainguard"})
		})
	}
}

// chartFile is the content of the file at path in the chart.
func chartFile(t *testing.T, path string) []byte {
	t.Helper()
	dir, err := Dir()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(dir, path))
	require.NoError(t, err)
	return data
}

// schemaAt returns the schema object at a /-separated path of "properties"
// ("" for the whole schema).
func schemaAt(t *testing.T, path string) map[string]any {
	t.Helper()
	var node map[string]any
	require.NoError(t, json.Unmarshal(chartFile(t, "values.schema.json"), &node))
	if path == "" {
		return node
	}
	for _, key := range strings.Split(path, "/") {
		props, ok := node["properties"].(map[string]any)
		require.True(t, ok, "no properties above %s", key)
		node, ok = props[key].(map[string]any)
		require.True(t, ok, "values.schema.json has no %s", path)
	}
	return node
}

// listAfter extracts the comma-separated list a parser's error names after
// marker, e.g. "must be one of grace, force, off".
func listAfter(t *testing.T, err error, marker string) []string {
	t.Helper()
	require.Error(t, err)
	_, list, found := strings.Cut(err.Error(), marker)
	require.True(t, found, "%q lost its list of values", err)
	return strings.Split(list, ", ")
}

// TestChartSchemaEnumsAreTheBinarysValues: the schema's faultScheduling and
// recoverStrategy values are exactly those the binary's parsers accept (the
// lists the parsers' own error messages give), so neither can drift.
func TestChartSchemaEnumsAreTheBinarysValues(t *testing.T) {
	_, err := contract.ParseFaultScheduling("x")
	modes := listAfter(t, err, "must be one of ")
	var enum []string
	for _, v := range schemaAt(t, "config/faultScheduling")["enum"].([]any) {
		enum = append(enum, v.(string))
	}
	assert.ElementsMatch(t, modes, enum)

	_, err = contract.ParseRecoverStrategy("x")
	strategies := listAfter(t, err, "comma-separated subset of ")
	pattern := regexp.MustCompile(schemaAt(t, "config/recoverStrategy")["pattern"].(string))
	for _, s := range strategies {
		assert.True(t, pattern.MatchString(s), "the schema refuses strategy %q, which the binary accepts", s)
		_, err := contract.ParseRecoverStrategy(s + "x")
		require.Error(t, err)
		assert.False(t, pattern.MatchString(s+"x"), "the schema takes %q, which the binary refuses", s+"x")
	}
	all := strings.Join(strategies, ",")
	_, err = contract.ParseRecoverStrategy(all)
	require.NoError(t, err)
	assert.True(t, pattern.MatchString(all))
	assert.True(t, pattern.MatchString(configv1alpha1.DefaultRecoverStrategy), "the default")
}
