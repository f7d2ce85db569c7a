package main

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/config"
	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
)

// serveFlags parses args with the rescheduler's flags bound as serve binds them.
func serveFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o := rescheduler.DefaultOptions()
	o.BindFlags(fs)
	require.NoError(t, fs.Parse(args))
	return fs
}

func TestConfigurationDefaultsAreTheReschedulersDefaults(t *testing.T) {
	o, err := reschedulerOptions(config.DefaultConfig().Rescheduler, serveFlags(t), "trainguard-system")
	require.NoError(t, err)
	want := rescheduler.DefaultOptions()
	want.Namespace = "trainguard-system"
	assert.Equal(t, want, o, "the Configuration's defaulting and the rescheduler's own defaults must not drift")
}

func TestFlagsOverrideTheConfigurationOnlyWhenGiven(t *testing.T) {
	cfg, err := config.ParseConfig([]byte(`apiVersion: config.trainguard.io/v1alpha1
kind: Configuration
rescheduler:
  nodeLostGrace: 2m
  maxBadNodes: 4
  unknownExitCodeRetryable: true
`))
	require.NoError(t, err)
	o, err := reschedulerOptions(cfg.Rescheduler, serveFlags(t, "--max-bad-nodes=3", "--rescheduler=false"), "trainguard-system")
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, o.NodeLostGrace, "from the file: the flag was not given")
	assert.True(t, o.DefaultRetryable, "from the file")
	assert.Equal(t, 3, o.MaxBadNodes, "the flag wins over the file")
	assert.False(t, o.Enabled, "the flag wins over the default")
	assert.Equal(t, config.DefaultBadNodeTTL, o.BadNodeTTL, "defaulted")

	_, err = reschedulerOptions(cfg.Rescheduler, serveFlags(t, "--reschedule-backoff-max=1s"), "trainguard-system")
	require.ErrorContains(t, err, "reschedule-backoff-max", "the merged options are validated")
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
