package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/version"
)

// TestServeHelpPinsTheAgentImage: the agent image a cluster pulls when the
// config names none is this release's, shown in --help, never `latest`.
func TestServeHelpPinsTheAgentImage(t *testing.T) {
	res := runCLI(t, "", "serve", "--help")
	require.Equal(t, 0, res.code, res.stderr)
	assert.NotContains(t, strings.ToLower(res.stdout), "latest")
	assert.Contains(t, res.stdout, `--agent-image string`)
	assert.Contains(t, res.stdout, `(default "`+version.Image+`")`)
	assert.Equal(t, version.Image, configv1alpha1.Default().Agent.Image)
	for _, flag := range []string{"--metrics-secure", "--max-concurrent-reviews", "--max-inflight-request-bytes",
		"--review-queue-wait", "--webhook-read-timeout", "--webhook-write-timeout", "--webhook-idle-timeout",
		"--webhook-read-header-timeout", "--webhook-body-read-timeout", "--webhook-max-connections", "--webhook-max-connections-per-source",
		"--webhook-handshake-timeout"} {
		assert.Contains(t, res.stdout, flag)
	}
}

// TestServeHelpStatesThePrecedence: --help says which wins, file or flag.
func TestServeHelpStatesThePrecedence(t *testing.T) {
	res := runCLI(t, "", "serve", "--help")
	require.Equal(t, 0, res.code, res.stderr)
	help := strings.Join(strings.Fields(res.stdout), " ")
	assert.Contains(t, help, config.Precedence)
	assert.Contains(t, help, "(file: rescheduler.nodeLostGrace)", "each setting's flag names its file key")
}

// TestRootHelpNamesEveryJobKind: the first thing a user reads names
// every kind trainguard handles, TrainJobs included.
func TestRootHelpNamesEveryJobKind(t *testing.T) {
	res := runCLI(t, "", "--help")
	require.Equal(t, 0, res.code)
	help := strings.Join(strings.Fields(res.stdout), " ")
	for _, kind := range []string{"PyTorchJobs", "KubeDL", "TrainJobs", "pods"} {
		assert.Contains(t, help, kind)
	}
}
