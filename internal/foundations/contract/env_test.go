package contract

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/testing/repo"
)

// envName is how the agent and the SDK spell an env variable: a quoted
// TRAINGUARD_ or MIGRATION_ name.
var envName = regexp.MustCompile(`["'](TRAINGUARD_[A-Z_]+|MIGRATION_[A-Z_]+)["']`)

// spelledIn returns the env names quoted in the files matching glob
// (tests excluded: they may set names of their own).
func spelledIn(t *testing.T, glob string) []string {
	t.Helper()
	files, err := filepath.Glob(glob)
	require.NoError(t, err)
	require.NotEmpty(t, files, glob)
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(filepath.Base(f), "test_") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range envName.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return names
}

// The agent (standard library only) and the SDK (Python) cannot import
// this package, so they spell the env names again; this test ties their
// spellings to EnvVars, both ways: a name they read that is not listed (a
// typo, or a new variable without a home), and a listed reader that does
// not read its variable, both fail.
func TestEnvNamesAreTheAgentsAndTheSDKs(t *testing.T) {
	var agent, sdk []string
	for _, v := range EnvVars() {
		if v.Agent {
			agent = append(agent, v.Name)
		}
		if v.SDK {
			sdk = append(sdk, v.Name)
		}
	}
	slices.Sort(agent)
	slices.Sort(sdk)
	root := moduleRoot(t)
	assert.Equal(t, agent, spelledIn(t, filepath.Join(root, "internal", "agent", "*.go")), "env names internal/agent reads vs contract.EnvVars (Agent)")
	assert.Equal(t, sdk, spelledIn(t, filepath.Join(root, "sdk", "python", "trainguard", "*.py")), "env names the SDK reads vs contract.EnvVars (SDK)")
}

// The agent writes the checkpoint outcome line the outcome controller
// parses; it spells the prefix itself, so this ties the two.
func TestOutcomePrefixIsTheAgents(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(moduleRoot(t), "internal", "agent", "termination.go"))
	require.NoError(t, err)
	assert.Contains(t, string(src), `"`+CheckpointOutcomePrefix+`"`, "internal/agent/termination.go must write contract.CheckpointOutcomePrefix")
}

// moduleRoot is the directory of trainguard's go.mod, wherever this package lives.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	require.NoError(t, err)
	return root
}

// The SDK cannot import this package, so it spells the peer-lost exit code
// again; this ties the two.
func TestExitPeerLostIsTheSDKs(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(moduleRoot(t), "sdk", "python", "trainguard", "_peer.py"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^EXIT_PEER_LOST = (\d+)\b`).FindStringSubmatch(string(src))
	require.NotNil(t, m, "sdk/python/trainguard/_peer.py must define EXIT_PEER_LOST")
	assert.Equal(t, strconv.Itoa(ExitPeerLost), m[1], "the SDK's EXIT_PEER_LOST vs contract.ExitPeerLost")
}

// The SDK spells the status port and its paths again; this ties the three.
func TestStatusPortAndPathsAreTheSDKs(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(moduleRoot(t), "sdk", "python", "trainguard", "_status.py"))
	require.NoError(t, err)
	for name, want := range map[string]string{
		"DEFAULT_PORT":    strconv.Itoa(StatusPort),
		"PATH":            strconv.Quote(StatusPath),
		"CHECKPOINT_PATH": strconv.Quote(CheckpointNowPath),
	} {
		m := regexp.MustCompile(`(?m)^` + name + ` = (\S+)`).FindStringSubmatch(string(src))
		if assert.NotNil(t, m, "sdk/python/trainguard/_status.py must define %s", name) {
			assert.Equal(t, want, m[1], "the SDK's %s vs contract", name)
		}
	}
}
