package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// rankPods are the two pods of a 2-rank PyTorchJob sharing the job's
// checkpoint directory, each running the example trainer as one process
// (RANK, WORLD_SIZE, MASTER_ADDR as the training operator sets them), not
// under torchrun: torchrun exits 1 whatever its worker's exit code.
type rankPods struct {
	pods [2]pod
	port int
}

func newRankPods(t testing.TB) rankPods {
	master := newPod(t)
	worker := master
	worker.name = "job-worker-0"
	worker.signalDir = filepath.Join(master.ckptDir, ".trainguard", worker.name)
	return rankPods{pods: [2]pod{master, worker}, port: freePort(t)}
}

// env is rank's environment as the training operator sets it, then extra.
func (r rankPods) env(rank int, extra ...string) []string {
	return append([]string{"OMP_NUM_THREADS=1", "WORLD_SIZE=2", "RANK=" + strconv.Itoa(rank), "LOCAL_RANK=0",
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(r.port)}, extra...)
}

func (r rankPods) start(t *testing.T, args ...string) [2]*proc {
	var procs [2]*proc
	for rank, p := range r.pods {
		procs[rank] = startTrainer(t, p, r.env(rank), args...)
	}
	return procs
}

// uninterrupted runs a fresh 2-rank job for steps, never interrupted,
// and returns where it dumped its final state (".rank0", ".rank1" added),
// the reference a recovered run must equal.
func uninterrupted(t *testing.T, steps string, timeout time.Duration) string {
	dump := filepath.Join(t.TempDir(), "ref")
	for _, r := range newRankPods(t).start(t, "--steps", steps, "--dump-final", dump) {
		require.NoError(t, r.wait(timeout), r.out.String())
	}
	return dump
}

// TestPeerKilledDuringAllReduce: the worker's trainer is
// SIGKILLed (the OOM killer) mid-training, and the master's all_reduce fails
// with "Connection reset/closed by peer". The master must exit with the
// retryable contract.ExitPeerLost, never 1 (a permanent failure under
// kubeflow's ExitCode policy), after committing the last step it completed
// (the dying gasp), and the restarted job must resume at exactly that state:
// bit-identical to an uninterrupted run of that many steps.
func TestPeerKilledDuringAllReduce(t *testing.T) {
	job := newRankPods(t)
	ranks := job.start(t, "--steps", "100000", "--step-delay", "0.05")
	ranks[1].waitFor(`rank 1: completed step 5 `, 120*time.Second)
	killed := time.Now()
	ranks[1].signal(syscall.SIGKILL)
	ranks[0].wait(60 * time.Second)
	require.Equal(t, contract.ExitPeerLost, ranks[0].cmd.ProcessState.ExitCode(), ranks[0].out.String())
	out := ranks[0].out.String()
	t.Logf("worker SIGKILLed -> master exited %d: %s", contract.ExitPeerLost, ranks[0].exitedAt.Sub(killed))
	assert.Contains(t, out, "a peer is gone")

	completed := regexp.MustCompile(`rank 0: completed step (\d+) `).FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, completed, out)
	last := completed[len(completed)-1][1]
	m := regexp.MustCompile(`dying gasp: committed (\S+), the last completed step (\d+), in (\S+)s`).FindStringSubmatch(out)
	require.NotNil(t, m, "no dying-gasp checkpoint: %s", out)
	t.Logf("dying gasp of step %s committed in %ss", m[2], m[3])
	assert.Equal(t, last, m[2], "the gasp saved another step than the last one rank 0 completed")
	pointer := readJSONFile(t, filepath.Join(job.pods[0].ckptDir, "trainguard-latest.json"))
	assert.Equal(t, m[1], pointer["file"])
	assert.Equal(t, last, strconv.Itoa(int(pointer["step"].(float64))))

	// An uninterrupted run of that many steps: the gasp holds exactly its
	// rank 0's state (the loss in its metrics is rank 0's own).
	refDump := uninterrupted(t, last, 120*time.Second)
	compareStates(t, "--checkpoint", job.pods[0].ckptDir, "--name", m[1], refDump+".rank0")

	// The job restarts: both ranks resume from the gasp.
	job.port = freePort(t)
	dump := filepath.Join(t.TempDir(), "resumed")
	next := job.start(t, "--steps", last, "--dump-state", dump)
	for rank, r := range next {
		got := r.waitFor(strconv.Itoa(rank)+`: resumed from (\S+) at step (\d+)`, 120*time.Second)
		assert.Equal(t, m[1], got[1], "rank %d", rank)
		assert.Equal(t, last, got[2], "rank %d", rank)
		require.NoError(t, r.wait(120*time.Second), r.out.String())
	}
	compareStates(t, dump+".rank0", dump+".rank1", refDump+".rank0")
}

// TestTorchrunRankKilledLosesNoStep: one of torchrun's workers is SIGKILLed
// while both ranks sit between steps (the example trainer's step delay).
// torchrun's agent, polling every second as trainguard configures it
// (PET_MONITOR_INTERVAL=1), stops the surviving rank 0 with SIGTERM before
// its next collective fails. Before the fix SIGTERM's default action killed
// rank 0 there, without its dying gasp, and the workers torchrun restarted
// (PET_MAX_RESTARTS) began again from the last periodic checkpoint (the e2e
// rank-crash TrainJob lost 7 and 9 steps). Now rank 0 still commits the last
// step it completed and the restarted ranks resume exactly there.
func TestTorchrunRankKilledLosesNoStep(t *testing.T) {
	p := newPod(t)
	tr := startProc(t, p.env("OMP_NUM_THREADS=1", "PET_MAX_RESTARTS=1", "PET_MONITOR_INTERVAL=1"),
		torchrunArgv(t, "--steps", "100000", "--step-delay", "2")...)
	tr.waitFor(`rank 1: completed step 3 `, 120*time.Second)
	rank1 := workerOfRank(t, tr.cmd.Process.Pid, 1)
	require.NoError(t, syscall.Kill(rank1, syscall.SIGKILL))
	// rank 0's first line after the agent stopped the workers: a resume, or
	// (no checkpoint) its first step again.
	m := tr.waitFor(`(?s)closing signal SIGTERM.*?rank 0: (resumed from \S+ at step (\d+)|completed step \d+ )`, 120*time.Second)
	out := tr.out.String()
	before, _, _ := strings.Cut(out, "closing signal SIGTERM")
	completed := regexp.MustCompile(`rank 0: completed step (\d+) `).FindAllStringSubmatch(before, -1)
	require.NotEmpty(t, completed, out)
	last := completed[len(completed)-1][1]
	require.NotEmpty(t, m[2], "the restarted rank 0 began again without a checkpoint (%q): every step was lost; %s", m[1], out)
	assert.Equal(t, last, m[2], "the restarted workers resume at the last step rank 0 completed: %s", out)
	pointer := readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-latest.json"))
	assert.Equal(t, last, strconv.Itoa(int(pointer["step"].(float64))), "rank 0's dying gasp committed its last completed step")
}

// workerOfRank is the pid of the child of torchrun (pid) whose environment
// has RANK=rank.
func workerOfRank(t *testing.T, pid, rank int) int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	require.NoError(t, err)
	want := "RANK=" + strconv.Itoa(rank)
	for _, f := range tasks {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, c := range strings.Fields(string(raw)) {
			env, err := os.ReadFile("/proc/" + c + "/environ")
			if err != nil {
				continue
			}
			if slices.Contains(strings.Split(string(env), "\x00"), want) {
				n, err := strconv.Atoi(c)
				require.NoError(t, err)
				return n
			}
		}
	}
	require.Failf(t, "no worker", "torchrun (pid %d) has no child with %s", pid, want)
	return 0
}
