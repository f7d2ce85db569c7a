package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// startSupervised runs each rank as a PyTorchJob pod would with the
// supervisor as its command: python3 -m trainguard supervise -- train.py.
func (r rankPods) startSupervised(t testing.TB, extra [2][]string, args ...string) [2]*proc {
	var procs [2]*proc
	for rank := range r.pods {
		procs[rank] = r.startRank(t, rank, extra[rank], args...)
	}
	return procs
}

// startRank starts one rank's pod under the supervisor: at the job's
// start, or as the replacement of a pod that died.
func (r rankPods) startRank(t testing.TB, rank int, extra []string, args ...string) *proc {
	argv := append([]string{python, "-m", "trainguard", "supervise", "--", python, "examples/trainer/train.py"}, args...)
	return startProc(t, r.pods[rank].env(r.env(rank, extra...)...), argv...)
}

// trainerPid is the pid of the trainer of pod p, from its heartbeat.
func trainerPid(t testing.TB, p pod) int {
	hb := readJSONFile(t, filepath.Join(p.signalDir, "heartbeat.json"))
	return int(hb["pid"].(float64))
}

// TestInProcessRecoveryKeepsTheSurvivor: one rank's trainer is SIGKILLed
// 30 steps into a run whose first periodic checkpoint is due at step 100.
// The survivor keeps its process (same pid), re-forms the group with the
// trainer its supervisor started again, and hands it the state of the last
// completed step from memory: no step lost, though no checkpoint exists,
// and both ranks end bit-identical to an uninterrupted run. The new trainer
// is a fork of its supervisor, torch already imported. Rank 0's trainer
// (whose process hosted the store before the supervisor did) and a
// worker's.
func TestInProcessRecoveryKeepsTheSurvivor(t *testing.T) {
	const steps = "110"
	refDump := uninterrupted(t, steps, 180*time.Second)
	for _, victim := range []int{1, 0} {
		t.Run("kill rank "+strconv.Itoa(victim), func(t *testing.T) {
			survivor := 1 - victim
			job := newRankPods(t)
			dump := filepath.Join(t.TempDir(), "final")
			ranks := job.startSupervised(t, [2][]string{}, "--steps", steps, "--step-delay", "0.05",
				"--save-every", "100", "--dump-final", dump)
			ranks[victim].waitFor(`rank `+strconv.Itoa(victim)+`: completed step 30 `, 180*time.Second)
			before := trainerPid(t, job.pods[survivor])
			require.NoError(t, syscall.Kill(trainerPid(t, job.pods[victim]), syscall.SIGKILL))
			killed := time.Now()
			m := ranks[survivor].waitFor(`re-forming the group in this process \(pid (\d+)\) after step (\d+)`, 60*time.Second)
			assert.Equal(t, strconv.Itoa(before), m[1], "the survivor's process changed")
			ranks[survivor].waitFor(`re-formed the group at generation 2 in (\S+)s`, 60*time.Second)
			got := ranks[victim].waitFor(`rank \d: resumed from peer:rank(\d) at step (\d+)`, 60*time.Second)
			t.Logf("SIGKILL -> state handed over: %s (survivor's step %s)", time.Since(killed), m[2])
			assertForkedRestart(t, ranks[victim], job.pods[victim])
			assert.Equal(t, strconv.Itoa(survivor), got[1])
			assert.Equal(t, m[2], got[2], "the restarted rank resumes at the survivor's last completed step")
			n, err := strconv.Atoi(got[2])
			require.NoError(t, err)
			assert.GreaterOrEqual(t, n, 30, "a step the victim completed was lost")
			_, err = os.Stat(filepath.Join(job.pods[0].ckptDir, "trainguard-latest.json"))
			require.True(t, os.IsNotExist(err), "a checkpoint was read or written: %v", err)
			for rank, r := range ranks {
				require.NoError(t, r.wait(180*time.Second), "rank %d: %s", rank, r.out.String())
			}
			assert.Equal(t, before, trainerPid(t, job.pods[survivor]), "the survivor's trainer was restarted")
			// Each rank's metrics hold its own loss: rank by rank.
			compareStates(t, dump+".rank0", refDump+".rank0")
			compareStates(t, dump+".rank1", refDump+".rank1")
		})
	}
}

// TestInProcessRecoveryAfterAnException: rank 0's trainer raises (an
// uncaught exception in the user's code, exit 1) 30 steps into a run with
// no checkpoint before step 100. Its supervisor, which hosts the job's
// store, starts it again in its container, as after a kill; the survivor
// keeps its process and hands it the last completed step's state: both
// ranks end bit-identical to an uninterrupted run.
func TestInProcessRecoveryAfterAnException(t *testing.T) {
	const steps = "110"
	refDump := uninterrupted(t, steps, 180*time.Second)
	job := newRankPods(t)
	dump, raise := filepath.Join(t.TempDir(), "final"), filepath.Join(t.TempDir(), "raise")
	args := []string{"--steps", steps, "--step-delay", "0.05", "--save-every", "100", "--dump-final", dump}
	ranks := [2]*proc{
		job.startRank(t, 0, nil, append(args, "--raise-if-exists", raise)...), // only rank 0 looks for the file
		job.startRank(t, 1, nil, args...),
	}
	ranks[0].waitFor(`rank 0: completed step 30 `, 180*time.Second)
	survivor := trainerPid(t, job.pods[1])
	require.NoError(t, os.WriteFile(raise, nil, 0o644))
	for rank, r := range ranks {
		require.NoError(t, r.wait(180*time.Second), "rank %d: %s", rank, r.out.String())
	}
	out := ranks[0].out.String()
	assert.Contains(t, out, "RuntimeError: injected failure")
	assert.Contains(t, out, "exited 1 (an uncaught exception); starting it again (1 of 3")
	m := regexp.MustCompile(`rank 0: resumed from peer:rank1 at step (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "the restarted rank did not take its peer's state: %s", out)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 30, "a step completed before the exception was lost")
	assert.Equal(t, survivor, trainerPid(t, job.pods[1]), "the survivor's trainer was restarted")
	compareStates(t, dump+".rank0", refDump+".rank0")
	compareStates(t, dump+".rank1", refDump+".rank1")
}

// TestInProcessRecoveryTimesOutInto138: the killed rank is not started
// again (its supervisor may restart nothing), so the group cannot re-form:
// the survivor waits TRAINGUARD_REFORM_TIMEOUT, then takes the present
// path: its dying gasp commits the last completed step and it exits 138,
// which its supervisor passes on.
func TestInProcessRecoveryTimesOutInto138(t *testing.T) {
	job := newRankPods(t)
	ranks := job.startSupervised(t, [2][]string{{"TRAINGUARD_REFORM_TIMEOUT=3s"}, {"TRAINGUARD_INPROCESS_RESTARTS=0"}},
		"--steps", "100000", "--step-delay", "0.05")
	ranks[1].waitFor(`rank 1: completed step 5 `, 180*time.Second)
	require.NoError(t, syscall.Kill(trainerPid(t, job.pods[1]), syscall.SIGKILL))
	ranks[1].wait(60 * time.Second)
	assert.Equal(t, 128+int(syscall.SIGKILL), ranks[1].cmd.ProcessState.ExitCode(), "the supervisor keeps the code of a signal")
	ranks[0].wait(60 * time.Second)
	out := ranks[0].out.String()
	require.Equal(t, contract.ExitPeerLost, ranks[0].cmd.ProcessState.ExitCode(), out)
	assert.Contains(t, out, "did not re-form at generation 2 within 3s (TRAINGUARD_REFORM_TIMEOUT)")
	m := regexp.MustCompile(`dying gasp: committed \S+, the last completed step (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "no dying gasp after the timeout: %s", out)
}

// TestInProcessRecoveryRefusesAMismatchedState: the trainer started again
// runs other code (it registers one more object). It refuses the
// survivor's state before loading any of it, naming the mismatch, and
// loads the checkpoint; the survivor exits 138 without a gasp (its state is
// the old code's), so the job restarts from the checkpoint.
func TestInProcessRecoveryRefusesAMismatchedState(t *testing.T) {
	job := newRankPods(t)
	changed := filepath.Join(t.TempDir(), "changed")
	ranks := job.startSupervised(t, [2][]string{},
		"--steps", "100000", "--step-delay", "0.05", "--save-every", "10", "--extra-if-exists", changed)
	ranks[1].waitFor(`rank 1: completed step 25 `, 180*time.Second)
	require.NoError(t, os.WriteFile(changed, nil, 0o644))
	require.NoError(t, syscall.Kill(trainerPid(t, job.pods[1]), syscall.SIGKILL))
	ranks[0].wait(60 * time.Second)
	out0 := ranks[0].out.String()
	require.Equal(t, contract.ExitPeerLost, ranks[0].cmd.ProcessState.ExitCode(), out0)
	assert.NotContains(t, out0, "dying gasp: committed")
	want := `rank 1 refused the state of rank 0: extra: registered here, not in the peer's state`
	assert.Contains(t, out0, want)
	m := ranks[1].waitFor(`(?s)`+regexp.QuoteMeta(want)+`; nothing of it is loaded: loading the checkpoint.*rank 1: resumed from (trainguard-ckpt-\S+) at step (\d+)`, 60*time.Second)
	t.Logf("the restarted rank refused the peer's state and resumed from %s at step %s", m[1], m[2])
}

// TestInProcessRecoveryWhenRank0sPodIsReplaced: rank 0's whole pod dies
// (its supervisor, which hosted the job's store, with it) and its
// replacement comes up later under the same name. The surviving worker
// cannot re-form with a store that is gone: it exits to rejoin, its
// supervisor starts it again in its container (no kubelet restart, no
// crash-loop back-off), and that trainer joins the replacement's new store;
// both resume from the last periodic checkpoint. Forked trainers, and
// trainers started as new processes (whose supervisor joins for them).
func TestInProcessRecoveryWhenRank0sPodIsReplaced(t *testing.T) {
	for name, env := range map[string][]string{"fork": nil, "new process": {"TRAINGUARD_FORK=0"}} {
		t.Run(name, func(t *testing.T) {
			job := newRankPods(t)
			args := []string{"--steps", "60", "--step-delay", "0.05", "--save-every", "10"}
			ranks := job.startSupervised(t, [2][]string{env, append([]string{"TRAINGUARD_REFORM_TIMEOUT=3s"}, env...)}, args...)
			ranks[0].waitFor(`rank 0: completed step 25 `, 180*time.Second)
			ranks[0].signal(syscall.SIGKILL) // the pod: supervisor, store and trainer
			ranks[0].wait(30 * time.Second)
			ranks[1].waitFor(`store at 127\.0\.0\.1:\d+ did not answer within 3s`, 60*time.Second)
			ranks[1].waitFor(`exited 75 to rejoin its group at a new generation; starting it again \(1 of 3`, 60*time.Second)

			replacement := job.startRank(t, 0, env, args...)
			want := replacement.waitFor(`rank 0: resumed from (\S+) at step (\d+)`, 120*time.Second)
			got := ranks[1].waitFor(`rank 1: resumed from (\S+) at step (\d+)`, 120*time.Second)
			assert.Equal(t, want[1:], got[1:], "both ranks resume from the same checkpoint")
			for rank, r := range []*proc{replacement, ranks[1]} {
				require.NoError(t, r.wait(180*time.Second), "rank %d: %s", rank, r.out.String())
			}
			assert.NotContains(t, ranks[1].out.String(), "exiting 138", "the worker's container would have restarted")
		})
	}
}

// TestInProcessRecoveryUnderTorchrun: torchrun starts its two workers with
// PYTHON_EXEC=trainguard-python, as the webhook sets it, so each runs under
// a supervisor of its own, and the store is torchrun's agent's (its static
// rendezvous). One rank's trainer is SIGKILLed 30 steps before the first
// periodic checkpoint is due: its supervisor forks it again, the survivor
// keeps its process and hands it the last completed step from memory, and
// torchrun's agent never sees a worker fail (it would stop both and start
// them again from the checkpoint). Rank 1 killed, and rank 0.
func TestInProcessRecoveryUnderTorchrun(t *testing.T) {
	for _, victim := range []int{1, 0} {
		t.Run("kill rank "+strconv.Itoa(victim), func(t *testing.T) {
			survivor := 1 - victim
			p := newPod(t)
			logs := t.TempDir()
			argv := []string{python, "-m", "torch.distributed.run", "--nproc_per_node=2",
				"--master_port=" + strconv.Itoa(freePort(t)), "--redirects=2", "--tee=1", "--log_dir=" + logs,
				"examples/trainer/train.py", "--steps", "100000", "--step-delay", "0.1", "--save-every", "100"}
			tr := startProc(t, p.env("PET_MAX_RESTARTS=1", "PET_MONITOR_INTERVAL=1",
				"PATH="+filepath.Dir(python)+":"+os.Getenv("PATH"),
				"PYTHON_EXEC="+filepath.Join(world.repo, "sdk", "python", "scripts", "trainguard-python"),
				"TRAINGUARD_INPROCESS_RESTARTS=3", "TRAINGUARD_REFORM_TIMEOUT=30s"), argv...)
			stderr := func() string {
				files, _ := filepath.Glob(filepath.Join(logs, "*", "attempt_*", "*", "stderr.log"))
				var b strings.Builder
				for _, f := range files {
					raw, _ := os.ReadFile(f)
					b.Write(raw)
				}
				return b.String()
			}
			tr.waitFor(`rank `+strconv.Itoa(victim)+`: completed step 70 `, 180*time.Second)
			before := trainerOfRank(t, tr.cmd.Process.Pid, survivor)
			require.NoError(t, syscall.Kill(trainerOfRank(t, tr.cmd.Process.Pid, victim), syscall.SIGKILL))
			got := tr.waitFor(`rank \d: resumed from peer:rank(\d) at step (\d+)`, 60*time.Second)
			tr.waitFor(`rank `+strconv.Itoa(victim)+`: completed step `+strconv.Itoa(atoi(t, got[2])+2)+` `, 60*time.Second)
			assert.Equal(t, strconv.Itoa(survivor), got[1])
			assert.Equal(t, before, trainerOfRank(t, tr.cmd.Process.Pid, survivor), "the survivor's trainer was restarted")
			out, errs := tr.out.String(), stderr()
			assert.NotContains(t, out, "closing signal SIGTERM", "torchrun's agent stopped its workers")
			m := regexp.MustCompile(`re-forming the group in this process \(pid (\d+)\) after step (\d+)`).FindStringSubmatch(errs)
			require.NotNil(t, m, errs)
			assert.Equal(t, strconv.Itoa(before), m[1])
			assert.Equal(t, m[2], got[2], "the restarted rank resumes at the survivor's last completed step")
			assert.Regexp(t, `the trainer \(pid \d+\) died of SIGKILL; starting it again \(1 of 3`, errs)
			assert.Regexp(t, `forked the trainer \(pid \d+\): its code runs \S+s after the fork, at generation 2`, errs)
			_, err := os.Stat(filepath.Join(p.ckptDir, "trainguard-latest.json"))
			require.True(t, os.IsNotExist(err), "a checkpoint was read or written: %v", err)
			tr.signal(syscall.SIGTERM)
			_ = tr.wait(60 * time.Second)
		})
	}
}

// trainerOfRank is the pid of rank's trainer under torchrun (pid) and
// trainguard-python: the supervisor's child.
func trainerOfRank(t *testing.T, pid, rank int) int {
	t.Helper()
	sup := workerOfRank(t, pid, rank)
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", sup, sup))
	require.NoError(t, err)
	kids := strings.Fields(string(raw))
	require.Len(t, kids, 1, "supervisor %d of rank %d", sup, rank)
	return atoi(t, kids[0])
}
