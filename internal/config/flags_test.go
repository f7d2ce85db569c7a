package config

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
)

// The flag of a setting is derived from its path, never chosen: the names
// the rescheduler's flags had before the file keep working.
func TestFlagNameIsThePathInKebabCase(t *testing.T) {
	for path, want := range map[string]string{
		"clusterWide":                          "cluster-wide",
		"agent.image":                          "agent-image",
		"agent.imagePullPolicy":                "agent-image-pull-policy",
		"checkpoint.preStopTimeout":            "checkpoint-pre-stop-timeout",
		"taskd.port":                           "taskd-port",
		"trainingContainer.names":              "training-container-names",
		"rescheduler.enabled":                  "rescheduler",
		"rescheduler.badNodeTTL":               "bad-node-ttl",
		"rescheduler.unknownExitCodeRetryable": "unknown-exit-code-retryable",
		"rescheduler.backoffBase":              "backoff-base",
		"rescheduler.unhealthyZoneThreshold":   "unhealthy-zone-threshold",
	} {
		assert.Equal(t, want, FlagName(path), path)
	}
}

// ApplyFlags sets what was given and nothing else, lists and the
// mutators map included, and checks the result.
func TestApplyFlagsSetsOnlyTheGivenFlags(t *testing.T) {
	cfg, err := parseConfig([]byte(`apiVersion: config.trainguard.io/v1alpha1
kind: Configuration
trainingContainer: {names: [x]}
mutators: {taskd: false}
rescheduler: {maxBadNodes: 4, nodeLostGrace: 2m}
`))
	require.NoError(t, err)
	given := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	given.SetNormalizeFunc(NormalizeFlagName)
	BindFlags(given, configv1alpha1.Default())
	require.NoError(t, given.Parse([]string{"--mutators=gpu=false", "--training-container-names=a,b", "--max-bad-nodes=2",
		"--reschedule-backoff-max=7m", "--node-eviction-rate=0"}))
	require.NoError(t, ApplyFlags(cfg, given))
	assert.Equal(t, []string{"a", "b"}, cfg.TrainingContainer.Names)
	assert.Equal(t, map[string]bool{"taskd": false, "gpu": false}, cfg.Mutators, "the flag adds to the file's switches")
	assert.Equal(t, 2, cfg.Rescheduler.MaxBadNodes)
	assert.Equal(t, 2*time.Minute, cfg.Rescheduler.NodeLostGrace.Duration, "not given: the file's")
	assert.Equal(t, 7*time.Minute, cfg.Rescheduler.BackoffMax.Duration, "the old flag name")
	assert.Zero(t, *cfg.Rescheduler.NodeEvictionRate, "0 is a setting: it stops all action")

	bad := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	BindFlags(bad, configv1alpha1.Default())
	require.NoError(t, bad.Parse([]string{"--taskd-port=0", "--mutators=gpus=false"}))
	err = ApplyFlags(cfg, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `taskd.port: Invalid value: "0": must be between 1 and 65535 (to turn TaskD off, set taskd.enabled: false) (flag --taskd-port)`)
	assert.Contains(t, err.Error(), "mutators[gpus]: Invalid value: \"gpus\": unknown injection")
	assert.Contains(t, err.Error(), "(flag --mutators)")

	require.ErrorContains(t, (&boolMap{m: &cfg.Mutators}).Set("gpu"), `"gpu": use name=true or name=false`)
}

// A list of warnings, from the file or a flag, replaces the default list
// rather than adding to it; an empty one listens to none.
func TestNodeWarningListsReplaceTheDefaults(t *testing.T) {
	cfg, err := parseConfig([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\nnodeWarnings: {conditions: [KernelDeadlock=True]}\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"KernelDeadlock=True"}, cfg.NodeWarnings.Conditions)

	none, err := parseConfig([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\nnodeWarnings: {conditions: []}\n"))
	require.NoError(t, err)
	assert.Empty(t, none.NodeWarnings.Conditions)
	assert.NotNil(t, none.NodeWarnings.Conditions, "[] is none, not the default")

	unset, err := parseConfig([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\nnodeWarnings: {conditions: null}\n"))
	require.NoError(t, err)
	assert.Equal(t, configv1alpha1.DefaultWarningConditions(), unset.NodeWarnings.Conditions)

	given := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	BindFlags(given, configv1alpha1.Default())
	require.NoError(t, given.Parse([]string{"--node-warnings-conditions=GPUHealthy=False,DrainInProgress=True", "--node-warnings-taints=example.com/gpu-failing"}))
	require.NoError(t, ApplyFlags(cfg, given))
	assert.Equal(t, []string{"GPUHealthy=False", "DrainInProgress=True"}, cfg.NodeWarnings.Conditions)
	assert.Equal(t, []string{"example.com/gpu-failing"}, cfg.NodeWarnings.Taints)

	bad := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	BindFlags(bad, configv1alpha1.Default())
	require.NoError(t, bad.Parse([]string{"--node-warnings-conditions=MaintenancePlanned"}))
	err = ApplyFlags(cfg, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `nodeWarnings.conditions[0]: Invalid value: "MaintenancePlanned": no '=': write Type=Status, e.g. MaintenancePlanned=True (flag --node-warnings-conditions)`)
}
