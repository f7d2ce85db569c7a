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

const steps = 60

// TestGracefulMigration is the pod's life as Kubernetes runs it: training,
// preStop (the agent), SIGTERM, then a new pod that resumes. The resumed run
// must end bit-identical to a run that was never interrupted: no step lost
// or repeated, model and optimizer restored exactly.
func TestGracefulMigration(t *testing.T) {
	p := newPod(t)
	old := startTrainer(t, p, nil, "--steps", strconv.Itoa(steps), "--step-delay", "0.05")
	old.waitFor(`completed step 10 `, 60*time.Second)

	r := runAgent(t, p, "prestop", "--timeout=20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	ack := readJSONFile(t, filepath.Join(p.signalDir, "ack.json"))
	ackStep := int(ack["step"].(float64))
	assert.Equal(t, "ok", ack["status"])
	assert.Contains(t, preStopLog(t, p), "finish ckpts: generation 1 acknowledged")

	time.Sleep(300 * time.Millisecond) // the kubelet sends SIGTERM after the hook; let steps leak if they would
	old.signal(syscall.SIGTERM)
	require.Error(t, old.wait(20*time.Second), "trainer should die of SIGTERM")
	last := lastCompletedStep(t, old)
	assert.Equal(t, ackStep, last, "steps lost: the old trainer went on after the checkpoint")

	dump := filepath.Join(t.TempDir(), "resumed")
	final := filepath.Join(t.TempDir(), "final")
	next := startTrainer(t, p, nil, "--steps", strconv.Itoa(steps), "--dump-state", dump, "--dump-final", final)
	m := next.waitFor(`rank 0: resumed from (\S+) at step (\d+)`, 60*time.Second)
	assert.Equal(t, ack["checkpoint"], m[1])
	assert.Equal(t, strconv.Itoa(ackStep), m[2], "resumed at another step than the checkpoint's")
	require.NoError(t, next.wait(60*time.Second), next.out.String())
	compareStates(t, "--checkpoint", p.ckptDir, "--name", m[1], dump+".rank0")

	ref := newPod(t)
	refFinal := filepath.Join(t.TempDir(), "ref")
	reference := startTrainer(t, ref, nil, "--steps", strconv.Itoa(steps), "--dump-final", refFinal)
	require.NoError(t, reference.wait(60*time.Second), reference.out.String())
	compareStates(t, refFinal+".rank0", final+".rank0")
}

// TestCrashMidSave kills -9 the trainer while it writes a checkpoint: the
// previous checkpoint must survive intact and be the one resumed from.
func TestCrashMidSave(t *testing.T) {
	p := newPod(t)
	firstFinal := filepath.Join(t.TempDir(), "first")
	first := startTrainer(t, p, nil, "--steps", "20", "--save-every", "10", "--dump-final", firstFinal)
	require.NoError(t, first.wait(60*time.Second), first.out.String())
	pointer := readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-latest.json"))
	require.EqualValues(t, 20, pointer["step"])

	r := killTrainerMidSave(t, p, 25, "30s")
	assert.Equal(t, exitTrainerGone, r.code, r.stderr)
	assert.Less(t, r.elapsed, 15*time.Second, "the agent should notice the dead trainer, not sit out its timeout")
	assert.Contains(t, r.stderr, "trainer exited")
	after := readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-latest.json"))
	assert.Equal(t, pointer, after, "the pointer moved although the save never finished")

	dump := filepath.Join(t.TempDir(), "resumed")
	next := startTrainer(t, p, nil, "--steps", "22", "--save-every", "22", "--dump-state", dump)
	m := next.waitFor(`rank 0: resumed from (\S+) at step (\d+)`, 60*time.Second)
	assert.Equal(t, pointer["file"], m[1])
	assert.Equal(t, "20", m[2])
	require.NoError(t, next.wait(60*time.Second), next.out.String())
	compareStates(t, firstFinal+".rank0", dump+".rank0")
	leftovers, _ := filepath.Glob(filepath.Join(p.ckptDir, tmpCheckpointGlob))
	assert.Empty(t, leftovers, "the next save should clean up the crashed save's temp file")
}

// TestTwoRanksResumeFromTheSameCheckpoint runs the trainer under torchrun
// with two CPU processes (DDP over gloo) through a migration.
func TestTwoRanksResumeFromTheSameCheckpoint(t *testing.T) {
	p := newPod(t)
	old := startTorchrun(t, p, "--steps", "1000", "--step-delay", "0.03")
	old.waitFor(`rank 1: completed step 10 `, 90*time.Second)
	r := runAgent(t, p, "prestop", "--timeout=20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	ack := readJSONFile(t, filepath.Join(p.signalDir, "ack.json"))
	old.signal(syscall.SIGTERM)
	old.wait(30 * time.Second)

	dump := filepath.Join(t.TempDir(), "resumed")
	ackStep := int(ack["step"].(float64))
	next := startTorchrun(t, p, "--steps", strconv.Itoa(ackStep+5), "--dump-state", dump)
	for rank := 0; rank < 2; rank++ {
		m := next.waitFor(fmt.Sprintf(`rank %d: resumed from (\S+) at step (\d+)`, rank), 90*time.Second)
		assert.Equal(t, ack["checkpoint"], m[1], "rank %d", rank)
		assert.Equal(t, strconv.Itoa(ackStep), m[2], "rank %d", rank)
	}
	require.NoError(t, next.wait(90*time.Second), next.out.String())
	compareStates(t, "--checkpoint", p.ckptDir, "--name", ack["checkpoint"].(string), dump+".rank0", dump+".rank1")
}

func lastCompletedStep(t *testing.T, p *proc) int {
	t.Helper()
	m := p.waitFor(`(?s).*rank 0: completed step (\d+) `, time.Second)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// tmpCheckpointGlob matches a save in progress (written, not yet renamed).
const tmpCheckpointGlob = ".trainguard-ckpt-*.tmp-*"

// killTrainerMidSave starts a trainer whose saves stall after being written
// and before their rename (the test hook TRAINGUARD_TEST_SAVE_DELAY), lets it
// reach step, runs the agent's preStop with timeout, SIGKILLs the trainer as
// soon as the save has started, and returns what the agent did.
func killTrainerMidSave(t *testing.T, p pod, step int, timeout string) agentResult {
	t.Helper()
	victim := startTrainer(t, p, []string{"TRAINGUARD_TEST_SAVE_DELAY=60"}, "--steps", "100000", "--step-delay", "0.02")
	victim.waitFor(fmt.Sprintf("completed step %d ", step), 60*time.Second)
	agentDone := make(chan agentResult, 1)
	go func() { agentDone <- runAgent(t, p, "prestop", "--timeout="+timeout) }()
	tmpGlob := filepath.Join(p.ckptDir, tmpCheckpointGlob)
	require.Eventually(t, func() bool { m, _ := filepath.Glob(tmpGlob); return len(m) > 0 },
		20*time.Second, 20*time.Millisecond, "the save never started")
	victim.signal(syscall.SIGKILL)
	victim.wait(10 * time.Second)
	return <-agentDone
}
