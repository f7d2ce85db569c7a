package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigIsStrict(t *testing.T) {
	_, err := ParseConfig([]byte("checkpoint: {claim: x, preStopTimout: 30s}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "preStopTimout")
	_, err = ParseConfig([]byte("checkpoint: {path: /proc/x}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "checkpoint.path")
	_, err = ParseConfig([]byte("mutators: {gpus: false}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mutators[gpus]")
}

func TestLoadConfigErrors(t *testing.T) {
	_, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reading config file")
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("clusterWide: true\n"), 0o600))
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	assert.True(t, cfg.ClusterWide)
	assert.True(t, cfg.Excluded("kube-system"), "kube-system is always excluded")
}

// Issue 31, item 4: kube-public, kube-node-lease and every other kube-*
// namespace are never injected, whatever the list says, so cluster-wide mode
// cannot hand trainguard's account the namespaces of Kubernetes add-ons.
func TestKubeNamespacesAreAlwaysExcluded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ClusterWide = true
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease", "kube-flannel"} {
		assert.True(t, cfg.Excluded(ns), ns)
	}
	for _, ns := range []string{"ml-team", "kubeflow", "kube", "team-kube-x"} {
		assert.False(t, cfg.Excluded(ns), ns)
	}
}

// TestConfigReferenceShowsTheDefaults keeps docs/config-reference.yaml (in
// the README) honest: it must load strictly and equal the built-in defaults.
func TestConfigReferenceShowsTheDefaults(t *testing.T) {
	cfg, warnings, err := Load(filepath.Join("..", "..", "docs", "config-reference.yaml"))
	require.NoError(t, err)
	assert.Empty(t, warnings, "the reference shows the current, versioned format")
	want := DefaultConfig()
	want.Mutators = map[string]bool{}
	assert.Equal(t, want, cfg)
}

func TestConfigurationIsVersionedAndDefaulted(t *testing.T) {
	cfg, warnings, err := Parse([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\nrescheduler: {maxBadNodes: 2}\n"))
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.Equal(t, 2, cfg.Rescheduler.MaxBadNodes)
	assert.True(t, *cfg.Rescheduler.Enabled)
	assert.Equal(t, DefaultNodeLostGrace, cfg.Rescheduler.NodeLostGrace.Duration)

	_, warnings, err = Parse([]byte("clusterWide: true\n"))
	require.NoError(t, err)
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "deprecated")

	_, _, err = Parse([]byte("apiVersion: v1\nkind: ConfigMap\n"))
	require.ErrorContains(t, err, `apiVersion "v1" kind "ConfigMap" is not supported`)

	_, _, err = Parse([]byte("rescheduler: {backoffBase: 1m, backoffMax: 10s, nodeLostGrace: 0s}\n"))
	require.ErrorContains(t, err, "rescheduler.backoffMax")
	require.ErrorContains(t, err, "rescheduler.nodeLostGrace")

	_, _, err = Parse([]byte("rescheduler: {unhealthyClusterThreshold: 1.5, retryEvictionRate: -1, retryEvictionBurst: -2, unhealthyZoneThreshold: 0.0001}\n"))
	require.ErrorContains(t, err, "rescheduler.unhealthyClusterThreshold: Invalid value: 1.5: must be in (0, 1]")
	require.ErrorContains(t, err, "rescheduler.retryEvictionRate: Invalid value: -1: must not be negative")
	require.ErrorContains(t, err, "rescheduler.retryEvictionBurst: Invalid value: -2: must be at least 1")
	assert.NotContains(t, err.Error(), "unhealthyZoneThreshold", "a small share is valid")
}
