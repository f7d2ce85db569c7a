package checkpoint_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// container is a training container as the runtime sees it: main is the
// host pid the runtime signals. For a PID-1 trainer it is PID 1 of its own
// PID namespace (unshare --pid --fork --mount-proc, as a container runtime
// makes one), which the kernel shields from every signal it has no handler
// for, SIGKILL from outside excepted.
type container struct {
	tr   *proc
	main int
	pid1 bool
}

func startContainer(t *testing.T, p pod, pid1 bool, extraEnv []string, args ...string) container {
	t.Helper()
	argv := append([]string{python, "examples/trainer/train.py"}, args...)
	if pid1 {
		argv = append([]string{"unshare", "--pid", "--fork", "--mount-proc"}, argv...)
	}
	tr := startProc(t, p.env(extraEnv...), argv...)
	c := container{tr: tr, main: tr.cmd.Process.Pid, pid1: pid1}
	if pid1 {
		c.main = childPID(t, tr.cmd.Process.Pid)
	}
	return c
}

// childPID is unshare's only child: the namespace's PID 1, as the host numbers it.
func childPID(t *testing.T, parent int) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", parent, parent))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		pid, err = strconv.Atoi(f[0])
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "unshare started no child")
	return pid
}

// stopped is what a kubelet-style stop measured: the preStop's result, when
// it ended and when the trainer exited (both from the preStop's start), and
// how the trainer ended.
type stopped struct {
	agent    agentResult
	hookEnd  time.Duration
	exited   time.Duration
	killed   bool // the grace period ran out: SIGKILL
	exitCode int  // -1 when a signal ended it
}

// kubeletStop stops the container the way the kubelet does when its pod is
// deleted: it runs the preStop hook (the agent, exec'd into the container,
// so inside its PID namespace), then sends SIGTERM to the main process, then
// SIGKILL when the grace period, counted from the preStop's start, is over.
func kubeletStop(t *testing.T, p pod, c container, grace time.Duration, termLog string) stopped {
	t.Helper()
	argv := []string{world.agent, "prestop"}
	if c.pid1 {
		argv = append([]string{"nsenter", "-t", strconv.Itoa(c.main), "-p", "-m", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(p.env(), "TRAINGUARD_TERMINATION_MESSAGE_PATH="+termLog)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	s := stopped{agent: agentResult{stderr: stderr.String(), elapsed: time.Since(start)}, hookEnd: time.Since(start)}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		s.agent.code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("run the preStop hook: %v", err)
	}
	_ = syscall.Kill(c.main, syscall.SIGTERM)
	select {
	case <-c.tr.done:
	case <-time.After(time.Until(start.Add(grace))):
		s.killed = true
		_ = syscall.Kill(c.main, syscall.SIGKILL)
		c.tr.signal(syscall.SIGKILL)
		<-c.tr.done
	}
	s.exited = c.tr.exitedAt.Sub(start)
	s.exitCode = c.tr.cmd.ProcessState.ExitCode()
	return s
}

// stopGrace is the simulated terminationGracePeriodSeconds: long enough
// for the preStop (its timeout is 20 s, the checkpoint takes well under a
// second here), short enough that the old behaviour's wait for SIGKILL
// does not make the suite slow.
const stopGrace = 15 * time.Second

// TestTrainerExitsAfterItsTerminationCheckpoint: a stopping pod's trainer,
// whether or not it is its container's PID 1, stops training after the
// acknowledged checkpoint, waits until the agent has written the outcome
// (done.json), and exits 143 then, long before the grace period ends. The
// agent is not killed with it (its exit code and the termination message
// are there), and no step past the acknowledged one was taken.
func TestTrainerExitsAfterItsTerminationCheckpoint(t *testing.T) {
	figures := map[string]stopped{}
	for _, pid1 := range []bool{true, false} {
		name := map[bool]string{true: "PID 1", false: "not PID 1"}[pid1]
		t.Run(name, func(t *testing.T) {
			p := newPod(t)
			c := startContainer(t, p, pid1, nil, "--steps", "100000", "--step-delay", "0.02")
			c.tr.waitFor(`completed step 10 `, 60*time.Second)
			termLog := filepath.Join(t.TempDir(), "termination-log")
			s := kubeletStop(t, p, c, stopGrace, termLog)
			figures[name+", after"] = s

			require.Equal(t, exitOK, s.agent.code, "the preStop hook did not finish (killed with the trainer?): %s", s.agent.stderr)
			msg, err := os.ReadFile(termLog)
			require.NoError(t, err)
			assert.Contains(t, string(msg), `trainguard.io/checkpoint {"outcome":"saved"`)
			assert.Contains(t, preStopLog(t, p), "preStop finished: exit 0")
			assert.False(t, s.killed, "the trainer ran until SIGKILL; output:\n%s", c.tr.out.String())
			assert.Equal(t, 143, s.exitCode, "exit code; output:\n%s", c.tr.out.String())
			assert.Contains(t, c.tr.out.String(), "(agent: saved); exiting 143", "the trainer did not wait for the agent's outcome")

			ack := readJSONFile(t, filepath.Join(p.signalDir, "ack.json"))
			assert.Equal(t, int(ack["step"].(float64)), lastCompletedStep(t, c.tr), "a step after the acknowledged checkpoint (lost)")
			done := readJSONFile(t, filepath.Join(p.signalDir, "done.json"))
			assert.Equal(t, ack["generation"], done["generation"])
			assert.Equal(t, "saved", done["outcome"])
		})
	}
	// The old behaviour, for the figures only: the trainer holds at its
	// checkpoint until SIGTERM, which a PID 1 without a handler never gets.
	for _, pid1 := range []bool{true, false} {
		name := map[bool]string{true: "PID 1", false: "not PID 1"}[pid1]
		p := newPod(t)
		c := startContainer(t, p, pid1, []string{"TRAINGUARD_AFTER_CHECKPOINT=hold"}, "--steps", "100000", "--step-delay", "0.02")
		c.tr.waitFor(`completed step 10 `, 60*time.Second)
		figures[name+", before (hold)"] = kubeletStop(t, p, c, stopGrace, filepath.Join(t.TempDir(), "termination-log"))
	}
	printStopFigures(t, figures)
}

func printStopFigures(t *testing.T, figures map[string]stopped) {
	t.Logf("preStop start → trainer exit, grace period %s (figures, not asserted):", stopGrace)
	t.Logf("%-26s %12s %12s %10s", "trainer", "preStop", "exit", "how")
	for _, name := range []string{"PID 1, before (hold)", "PID 1, after", "not PID 1, before (hold)", "not PID 1, after"} {
		s, ok := figures[name]
		if !ok {
			continue
		}
		how := "exit " + strconv.Itoa(s.exitCode)
		switch {
		case s.killed:
			how = "SIGKILL"
		case s.exitCode < 0:
			how = "SIGTERM"
		}
		t.Logf("%-26s %12s %12s %10s", name, s.hookEnd.Round(time.Millisecond), s.exited.Round(time.Millisecond), how)
	}
}

// TestRestartedTrainerDoesNotAnswerAnAbandonedRequest: the agent gave up on
// its request (the trainer died mid-save: exit 7) and expired it; a trainer
// that starts in the same pod right after (the container restarted) must
// not save and stop for a request nobody waits for. Before the fix the
// request's deadline, the agent's budget, had not passed, so it did.
func TestRestartedTrainerDoesNotAnswerAnAbandonedRequest(t *testing.T) {
	p := newPod(t)
	r := killTrainerMidSave(t, p, 5, "60s")
	require.Equal(t, exitTrainerGone, r.code, r.stderr)
	req := readJSONFile(t, filepath.Join(p.signalDir, "request.json"))
	assert.Equal(t, true, req["expired"], "the abandoned request is not marked expired")

	next := startTrainer(t, p, nil, "--steps", "30", "--step-delay", "0.02")
	require.NoError(t, next.wait(60*time.Second), next.out.String())
	assert.NotContains(t, next.out.String(), "checkpoint requested", "the restarted trainer answered its predecessor's request")
	assert.Contains(t, next.out.String(), "ignoring expired request generation 1")
	assert.NoFileExists(t, filepath.Join(p.signalDir, "ack.json"))
}

// TestTorchrunRanksExitAfterTheTerminationCheckpoint: under torchrun (the
// container's main process), rank 0 exits 143 after its pod's termination
// checkpoint; rank 1, whose collective fails when rank 0 leaves, exits 143
// too (its pod's ack says why), and torchrun, which reports its workers'
// failure, ends without a SIGTERM. Neither rank took a step past the
// acknowledged one.
func TestTorchrunRanksExitAfterTheTerminationCheckpoint(t *testing.T) {
	p := newPod(t)
	tr := startTorchrun(t, p, "--steps", "100000", "--step-delay", "0.03")
	tr.waitFor(`rank 1: completed step 10 `, 90*time.Second)
	r := runAgent(t, p, "prestop", "--timeout=20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	ack := readJSONFile(t, filepath.Join(p.signalDir, "ack.json"))
	require.Error(t, tr.wait(60*time.Second), "torchrun reports its workers' non-zero exit")
	out := tr.out.String()
	for rank := 0; rank < 2; rank++ {
		assert.Regexp(t, fmt.Sprintf(`rank\s+: %d \(local_rank: %d\)\s+exitcode\s+: 143 `, rank, rank), out, "rank %d's exit code", rank)
		m := tr.waitFor(fmt.Sprintf(`(?s).*rank %d: completed step (\d+) `, rank), time.Second)
		assert.Equal(t, strconv.Itoa(int(ack["step"].(float64))), m[1], "rank %d went past the acknowledged step", rank)
	}
}
