package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
)

// effective runs `serve --print-config` with args and decodes what it prints.
func effective(t *testing.T, args ...string) *configv1alpha1.Configuration {
	t.Helper()
	res := runCLI(t, "", append([]string{"serve", "--print-config"}, args...)...)
	require.Equal(t, 0, res.code, res.stderr)
	cfg, _, err := config.Parse([]byte(res.stdout))
	require.NoError(t, err, res.stdout)
	return cfg
}

func TestPrintConfigWithoutFileOrFlagsIsTheDefault(t *testing.T) {
	assert.Equal(t, configv1alpha1.Default(), effective(t))
}

// One precedence rule for every flag: given on the command line, it wins
// over the file; left out, its default never overrides the file. The
// agent image follows it too (it used to be the other way round).
func TestFlagsOverrideTheConfigurationOnlyWhenGiven(t *testing.T) {
	file := writeFile(t, "c.yaml", `apiVersion: config.trainguard.io/v1alpha1
kind: Configuration
agent: {image: registry.example/from-file:1}
checkpoint: {claim: from-file}
rescheduler:
  nodeLostGrace: 2m
  maxBadNodes: 4
  unknownExitCodeRetryable: true
`)
	cfg := effective(t, "--config", file, "--max-bad-nodes=3", "--rescheduler=false", "--agent-image=registry.example/from-flag:2")
	assert.Equal(t, 2*time.Minute, cfg.Rescheduler.NodeLostGrace.Duration, "from the file: the flag was not given")
	assert.True(t, cfg.Rescheduler.UnknownExitCodeRetryable, "from the file")
	assert.Equal(t, "from-file", cfg.Checkpoint.Claim, "from the file")
	assert.Equal(t, 3, cfg.Rescheduler.MaxBadNodes, "the flag wins over the file")
	assert.Equal(t, "registry.example/from-flag:2", cfg.Agent.Image, "the flag wins over the file, --agent-image too")
	assert.False(t, *cfg.Rescheduler.Enabled, "the flag wins over the default")
	assert.Equal(t, configv1alpha1.DefaultBadNodeTTL, cfg.Rescheduler.BadNodeTTL.Duration, "defaulted")

	cfg = effective(t, "--config", file)
	assert.Equal(t, "registry.example/from-file:1", cfg.Agent.Image, "no flag: the file's image")

	// The old names of the backoff flags still work.
	cfg = effective(t, "--reschedule-backoff-base=2s", "--reschedule-backoff-max=3s")
	assert.Equal(t, 2*time.Second, cfg.Rescheduler.BackoffBase.Duration)
	assert.Equal(t, 3*time.Second, cfg.Rescheduler.BackoffMax.Duration)

	// The result is checked as the file is, with the field's path and its flag.
	res := runCLI(t, "", "serve", "--print-config", "--config", file, "--backoff-max=1s", "--max-bad-nodes=0", "--node-eviction-rate=-1")
	assert.Equal(t, 2, res.code)
	for _, want := range []string{
		"(3 problems)",
		`rescheduler.backoffMax: Invalid value: "1s": must not be below backoffBase (flag --backoff-max)`,
		"rescheduler.maxBadNodes: Invalid value: 0: must be at least 1 (unset takes the default, 16) (flag --max-bad-nodes)",
		"rescheduler.nodeEvictionRate: Invalid value: -1: must not be negative (0 stops all action) (flag --node-eviction-rate)",
	} {
		assert.Contains(t, res.stderr, want)
	}
}

func TestUnversionedConfigLoadsWithADeprecationWarning(t *testing.T) {
	legacy := writeFile(t, "legacy.yaml", "gpu: {defaultCount: 3, defaultFor: AllJobs}\n")
	res := runCLI(t, validJob, "inject", "-f", "-", "--config", legacy)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, `nvidia.com/gpu: "3"`, "the old format still applies")
	assert.Contains(t, res.stderr, "deprecated")
	assert.Contains(t, res.stderr, "apiVersion: config.trainguard.io/v1alpha1")

	versioned := writeFile(t, "v.yaml", "apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\ngpu: {defaultCount: 3}\n")
	res = runCLI(t, validJob, "validate", "-f", "-", "--config", versioned)
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	assert.NotContains(t, res.stderr, "deprecated")

	wrong := writeFile(t, "w.yaml", "apiVersion: config.trainguard.io/v2\nkind: Configuration\n")
	res = runCLI(t, validJob, "inject", "-f", "-", "--config", wrong)
	assert.Equal(t, 2, res.code)
	assert.Contains(t, res.stderr, "use apiVersion: config.trainguard.io/v1alpha1")
}

// TestServeRefusesNegativeWebhookTimeouts: net/http takes a negative
// timeout as none at all, so serve refuses one at start, naming the flag;
// zero (the default) and positive values start.
func TestServeRefusesNegativeWebhookTimeouts(t *testing.T) {
	flags := []string{"webhook-read-timeout", "webhook-read-header-timeout", "webhook-body-read-timeout", "webhook-write-timeout", "webhook-idle-timeout",
		"webhook-handshake-timeout"}
	for _, flag := range flags {
		t.Run(flag, func(t *testing.T) {
			res := runCLI(t, "", "serve", "--print-config", "--"+flag+"=-1s")
			assert.Equal(t, 2, res.code, res.stderr)
			assert.Contains(t, res.stderr, "--"+flag+"=-1s: must not be negative (0 takes the default)")
			assert.Empty(t, res.stdout, "nothing runs")

			for _, ok := range []string{"0s", "1ns", "5m"} {
				res := runCLI(t, "", "serve", "--print-config", "--"+flag+"="+ok)
				assert.Equal(t, 0, res.code, "%s=%s: %s", flag, ok, res.stderr)
			}
		})
	}
	var args []string
	for _, flag := range flags {
		args = append(args, "--"+flag+"=-1ns")
	}
	res := runCLI(t, "", append([]string{"serve", "--print-config"}, args...)...)
	assert.Equal(t, 2, res.code)
	for _, flag := range flags {
		assert.Contains(t, res.stderr, "--"+flag+"=-1ns: must not be negative", "every problem at once")
	}
}
