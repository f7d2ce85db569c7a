package checkpoint_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRankDyingMidSaveLeavesNothingToLoad runs two gloo ranks under
// torchrun, kills rank 0 with SIGKILL while it writes a checkpoint (after the
// files, before commit.json and the rename), and restarts the job: both
// ranks must resume from the previous committed checkpoint, never from the
// half-written one, and end on the same state.
func TestRankDyingMidSaveLeavesNothingToLoad(t *testing.T) {
	p := newPod(t)
	first := startTorchrun(t, p, "--steps", "10", "--save-every", "10")
	require.NoError(t, first.wait(120*time.Second), first.out.String())
	pointer := readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-latest.json"))
	require.EqualValues(t, 10, pointer["step"])

	victim := startProc(t, p.env("OMP_NUM_THREADS=1", "TRAINGUARD_TEST_SAVE_DELAY=60"), torchrunArgv(t, "--steps", "100000", "--step-delay", "0.02")...)
	victim.waitFor(`rank 1: completed step 15 `, 120*time.Second)
	agentDone := make(chan agentResult, 1)
	go func() { agentDone <- runAgent(t, p, "prestop", "--timeout=30s") }()
	tmpGlob := filepath.Join(p.ckptDir, ".trainguard-ckpt-*.tmp-*")
	require.Eventually(t, func() bool { m, _ := filepath.Glob(tmpGlob); return len(m) > 0 },
		30*time.Second, 20*time.Millisecond, "the save never started")
	hb := readJSONFile(t, filepath.Join(p.signalDir, "heartbeat.json"))
	require.EqualValues(t, 0, hb["rank"], "the heartbeat is rank 0's")
	require.NoError(t, syscall.Kill(int(hb["pid"].(float64)), syscall.SIGKILL), "kill rank 0")
	victim.wait(60 * time.Second)
	r := <-agentDone
	assert.NotEqual(t, exitOK, r.code, "a checkpoint that was never committed was acknowledged: %s", r.stderr)
	assert.Equal(t, pointer, readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-latest.json")),
		"the pointer moved although the save never finished")

	dump := filepath.Join(t.TempDir(), "resumed")
	next := startTorchrun(t, p, "--steps", "12", "--dump-state", dump)
	for rank := 0; rank < 2; rank++ {
		m := next.waitFor(fmt.Sprintf(`rank %d: resumed from (\S+) at step (\d+)`, rank), 120*time.Second)
		assert.Equal(t, pointer["file"], m[1], "rank %d", rank)
		assert.Equal(t, strconv.Itoa(10), m[2], "rank %d", rank)
	}
	require.NoError(t, next.wait(120*time.Second), next.out.String())
	// The checkpoint resumed from, named: the pointer may have moved since,
	// when the new rank 0 answered the request the killed one left behind
	// (its deadline had not passed), which the slower a machine, the likelier.
	compareStates(t, "--checkpoint", p.ckptDir, "--name", pointer["file"].(string), dump+".rank0", dump+".rank1")
}
