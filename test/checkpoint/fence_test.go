package checkpoint_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResetOfSaturatedGenerationsKeepsTheFence is the operator's way out
// of saturated fence generations (docs/checkpoint-protocol.md, "Resetting
// the generations") with the example trainer and the agent. A marker
// planted at 2^53-2 lets one incarnation take the last number, 2^53-1;
// after it every start fails, naming the reset. After the reset as
// documented, the next incarnation resumes and trains, its preStop is
// answered, and the incarnation that holds 2^53-1 (still running: no
// number can fence it) is refused at its next commit.
func TestResetOfSaturatedGenerationsKeepsTheFence(t *testing.T) {
	const maxGeneration = 1<<53 - 1
	p := newPod(t)
	require.NoError(t, os.Mkdir(filepath.Join(p.ckptDir, "trainguard-gen-9007199254740990"), 0o755))
	keepOn := []string{"TRAINGUARD_AFTER_CHECKPOINT=continue"}
	stale := startTrainer(t, p, keepOn, "--steps", "100000", "--step-delay", "0.05", "--save-every", "5")
	stale.waitFor(`completed step 12 `, 60*time.Second)
	assert.DirExists(t, filepath.Join(p.ckptDir, "trainguard-gen-9007199254740991"))

	blocked := startTrainer(t, p, nil, "--steps", "5")
	require.Error(t, blocked.wait(60*time.Second), blocked.out.String())
	reset := "python3 -m trainguard reset-generations " + p.ckptDir
	assert.Contains(t, blocked.out.String(), reset, "the failure names the way out")

	cmd := startProc(t, p.env(), python, "-m", "trainguard", "reset-generations", p.ckptDir)
	require.NoError(t, cmd.wait(60*time.Second), cmd.out.String())

	next := startTrainer(t, p, keepOn, "--steps", "100000", "--step-delay", "0.02")
	next.waitFor(`rank 0: resumed from \S+ at step \d+`, 60*time.Second)
	require.Error(t, stale.wait(30*time.Second), "the stale incarnation kept training:\n%s", stale.out.String())
	assert.Contains(t, stale.out.String(), "were reset", "refused by the reset's new line")
	assert.Contains(t, stale.out.String(), "stale incarnation")

	r := runAgent(t, p, "prestop", "--timeout=20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	ack := readJSONFile(t, filepath.Join(p.signalDir, "ack.json"))
	commit := readJSONFile(t, filepath.Join(p.ckptDir, ack["checkpoint"].(string), "commit.json"))
	line := readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-line.json"))
	assert.EqualValues(t, 1, commit["generation"], "the new line's first generation")
	assert.Equal(t, line["line"], commit["line"])
	ptr := readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-latest.json"))
	assert.Equal(t, ack["checkpoint"], ptr["file"], "the job's latest is the new line's")
	for _, name := range listDir(t, p.ckptDir) {
		if !strings.HasPrefix(name, "trainguard-ckpt-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p.ckptDir, name, "commit.json"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // pruned meanwhile: the trainer prunes after its ack, while this reads
		}
		require.NoError(t, err)
		var c map[string]any
		require.NoError(t, json.Unmarshal(b, &c), name)
		if c["line"] == nil {
			assert.EqualValues(t, int64(maxGeneration), c["generation"], "%s: a commit of the line before", name)
		}
	}
}
