package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
)

func TestConfigIsStrict(t *testing.T) {
	_, err := parseConfig([]byte("checkpoint: {claim: x, preStopTimout: 30s}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "preStopTimout")
	_, err = parseConfig([]byte("checkpoint: {path: /proc/x}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "checkpoint.path")
	_, err = parseConfig([]byte("mutators: {gpus: false}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mutators[gpus]")
}

func TestLoadConfigErrors(t *testing.T) {
	_, err := loadConfig(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reading config file")
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("clusterWide: true\n"), 0o600))
	cfg, err := loadConfig(path)
	require.NoError(t, err)
	assert.True(t, cfg.ClusterWide)
	assert.True(t, cfg.Excluded("kube-system"), "kube-system is always excluded")
}

// TestConfigReferenceShowsTheDefaults keeps docs/config-reference.yaml (in
// the README) honest: it must load strictly and equal the built-in defaults.
func TestConfigReferenceShowsTheDefaults(t *testing.T) {
	cfg, warnings, err := Load(filepath.Join("..", "..", "docs", "config-reference.yaml"))
	require.NoError(t, err)
	assert.Empty(t, warnings, "the reference shows the current, versioned format")
	want := configv1alpha1.Default()
	want.Mutators = map[string]bool{}
	assert.Equal(t, want, cfg)
}

// TestExampleConfigurationLoads: the file `make demo` and `make run` start
// trainguard with passes the same checks as any other.
func TestExampleConfigurationLoads(t *testing.T) {
	cfg, warnings, err := Load(filepath.Join("..", "..", "examples", "config.yaml"))
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.Equal(t, "ckpt-pvc", cfg.Checkpoint.Claim)
}

// TestExampleConfigurationShowsTheDefaults: examples/config.yaml says its
// values are the defaults except where a comment says otherwise (only the
// claim the demo creates), so `make demo` shows what an install does
// (in-place restarts included).
func TestExampleConfigurationShowsTheDefaults(t *testing.T) {
	cfg, _, err := Load(filepath.Join("..", "..", "examples", "config.yaml"))
	require.NoError(t, err)
	cfg.Checkpoint.Claim = "" // "Not a default" in the file
	want := configv1alpha1.Default()
	want.Mutators = map[string]bool{}
	assert.Equal(t, want, cfg, "examples/config.yaml sets a value other than the default without saying so")
}

func TestConfigurationIsVersionedAndDefaulted(t *testing.T) {
	cfg, warnings, err := Parse([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\nrescheduler: {maxBadNodes: 2}\n"))
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.Equal(t, 2, cfg.Rescheduler.MaxBadNodes)
	assert.True(t, *cfg.Rescheduler.Enabled)
	assert.Equal(t, configv1alpha1.DefaultNodeLostGrace, cfg.Rescheduler.NodeLostGrace.Duration)

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
	require.ErrorContains(t, err, "rescheduler.unhealthyClusterThreshold: Invalid value: 1.5: must be above 0 and at most 1")
	require.ErrorContains(t, err, "rescheduler.retryEvictionRate: Invalid value: -1: must not be negative")
	require.ErrorContains(t, err, "rescheduler.retryEvictionBurst: Invalid value: -2: must be at least 1")
	assert.NotContains(t, err.Error(), "unhealthyZoneThreshold", "a small share is valid")

	// client-go's leader elector refuses these at start-up without a path;
	// the file is refused first, naming the field and the rule.
	_, _, err = Parse([]byte("leaderElection: {leaseDuration: 20s, renewDeadline: 20s}\n"))
	require.ErrorContains(t, err, `leaderElection.renewDeadline: Invalid value: "20s": must be below leaseDuration (20s)`)
	_, _, err = Parse([]byte("leaderElection: {renewDeadline: 3s, retryPeriod: 3s, leaseDuration: 0s}\n"))
	require.ErrorContains(t, err, `leaderElection.leaseDuration: Invalid value: "0s": must be positive`)
	_, _, err = Parse([]byte("leaderElection: {renewDeadline: 3s, retryPeriod: 3s}\n"))
	require.ErrorContains(t, err, `leaderElection.retryPeriod: Invalid value: "3s": must be below renewDeadline (3s) / 1.2`)
	cfg, _, err = Parse([]byte("leaderElection: {leaseDuration: 45s, renewDeadline: 30s}\n"))
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, cfg.LeaderElection.RetryPeriod.Duration, "unset keeps its default")
}

// TestZeroMeansZero: a count set to 0 in the file is 0 (or refused with
// the field's path), never silently the default; unset takes the default.
func TestZeroMeansZero(t *testing.T) {
	cfg, err := parseConfig([]byte("maxReschedules: 0\n"))
	require.NoError(t, err)
	assert.Equal(t, 0, *cfg.MaxReschedules, "0 means never reschedule, as trainguard.io/max-reschedules: \"0\" does")
	cfg, err = parseConfig([]byte("{}\n"))
	require.NoError(t, err)
	assert.Equal(t, configv1alpha1.DefaultMaxReschedules, *cfg.MaxReschedules)
	assert.Equal(t, int32(configv1alpha1.DefaultTaskDPort), *cfg.TaskD.Port)
	assert.Equal(t, configv1alpha1.DefaultMaxBadNodes, cfg.Rescheduler.MaxBadNodes)
	assert.Equal(t, configv1alpha1.DefaultNodeEvictionBurst, cfg.Rescheduler.NodeEvictionBurst)

	for in, want := range map[string]string{
		"rescheduler: {maxBadNodes: 0}\n":       "rescheduler.maxBadNodes: Invalid value: 0: must be at least 1",
		"rescheduler: {nodeEvictionBurst: 0}\n": "rescheduler.nodeEvictionBurst: Invalid value: 0: must be at least 1",
		"taskd: {port: 0}\n":                    `taskd.port: Invalid value: "0": must be between 1 and 65535`,
		"maxReschedules: 1001\n":                `maxReschedules: Invalid value: "1001": must be an integer between 0 and 1000`,
	} {
		_, err := parseConfig([]byte(in))
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}

// TestConfigErrorsAreAllListedWithPaths: a configuration file's mistakes
// are reported as an object's are: every one at once, each with its field
// path, an unknown field with the nearest known one.
func TestConfigErrorsAreAllListedWithPaths(t *testing.T) {
	_, err := parseConfig([]byte(`apiVersion: config.trainguard.io/v1alpha1
kind: Configuration
checkpoint:
  clam: team-ckpt
  path: /etc/ckpt
rescheduler:
  maxBadNode: 3
taskd: {port: 0}
gpu: {defaultCount: 100}
`))
	require.Error(t, err)
	for _, want := range []string{
		"(5 problems)",
		`checkpoint.clam: unknown field "clam"; did you mean "claim"?`,
		`rescheduler.maxBadNode: unknown field "maxBadNode"; did you mean "maxBadNodes"?`,
		`checkpoint.path: Invalid value: "/etc/ckpt": must not be under the system directory /etc`,
		`taskd.port: Invalid value: "0": must be between 1 and 65535`,
		`gpu.defaultCount: Invalid value: "100": must be an integer between 0 and 64`,
	} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = parseConfig([]byte("gpu: {defaultCount: two}\nagent: {installCommand: /trainguard-agent}\nclusterwide: true\n"))
	require.Error(t, err)
	for _, want := range []string{
		`gpu.defaultCount: Invalid value: "two": must be of type integer`,
		`agent.installCommand: Invalid value: "/trainguard-agent": must be of type array`,
		`clusterwide: unknown field "clusterwide"; did you mean "clusterWide"?`,
	} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = parseConfig([]byte("maxReschedules: 2\nmaxReschedules: 3\n"))
	require.ErrorContains(t, err, `key "maxReschedules" already set in map`)
	_, err = parseConfig([]byte("- a\n"))
	require.ErrorContains(t, err, "must be a mapping")
}

// parseConfig is Parse for tests with no warning to check.
func parseConfig(data []byte) (*configv1alpha1.Configuration, error) {
	cfg, _, err := Parse(data)
	return cfg, err
}

// loadConfig is Load for tests with no warning to check.
func loadConfig(path string) (*configv1alpha1.Configuration, error) {
	cfg, _, err := Load(path)
	return cfg, err
}
