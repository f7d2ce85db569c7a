//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/test/goodput"
)

// rankCrashCase is one job of the rank-crash scenario: its kind (a
// PyTorchJob under a restart policy, or a TrainJob), which rank's trainer
// dies and how, and when.
type rankCrashCase struct {
	name      string
	policy    string // PyTorchJob restartPolicy; "" for a TrainJob
	signal    string // KILL (137, as the OOM killer) or SEGV (139)
	rank      int    // the rank whose trainer dies
	saveEvery int    // periodic checkpoint interval in steps
	killAt    int    // rank 0's step before the kill
}

const (
	rankCrashSaveEvery = 10
	// The figures' targets, printed beside them (not asserted: the machine
	// is shared): kill → training again.
	rankCrashTarget       = 10 * time.Second
	rankCrashMedianTarget = 5 * time.Second
	// rankCrashFarFromCheckpoint: at least one job is killed this many steps
	// after its last periodic checkpoint, so 0 steps lost can only come
	// from a peer's memory.
	rankCrashFarFromCheckpoint = 15
)

// rankCrashResult is what the scenario's assertions across jobs need.
type rankCrashResult struct {
	trained      time.Duration // kill → training again
	rank         int           // the rank killed
	inProcess    bool
	sinceCkpt    int // steps from the last periodic checkpoint to the step resumed
	survivorsPID bool
}

// rankCrash: one rank's trainer dies mid-training, killed
// (SIGKILL, 137, as the OOM killer does) or crashing (SIGSEGV, 139).
// Every job opts in to in-process recovery
// (trainguard.io/in-process-recovery: enabled): the dead trainer's
// supervisor starts it again at once in its container, the survivor keeps
// its process (same PID), re-forms the group and hands the returning rank
// the state of the last completed step from its memory; rank 0 dies in
// some jobs (its supervisor, or torchrun's agent, keeps the rendezvous
// store), a worker in others, and one job is killed far from its last
// periodic checkpoint. PyTorchJobs (OnFailure and ExitCode) run the
// trainer as the container's command, TrainJobs under torchrun, which
// starts each worker under its own supervisor. Asserted for each job:
// never Failed, 0 steps lost, the pods are the same pods on the same
// nodes, no bad node recorded, no container restarted, the survivor's PID
// unchanged, and torchrun's agent stopped no worker. A seventh job's rank segfaults on every start (a bug, not a
// fault): its restarts stop at the job's cap (rankCrashCap). The seven
// jobs run side by side; kill → training again is printed per job in its
// phases, with its targets.
func (e *env) rankCrash(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-rank-crash", true)
	cases := []rankCrashCase{
		{"onfailure-kill", "OnFailure", "KILL", 1, 40, 56},
		{"onfailure-segv", "OnFailure", "SEGV", 0, rankCrashSaveEvery, 15},
		{"exitcode-kill", "ExitCode", "KILL", 0, rankCrashSaveEvery, 15},
		{"exitcode-segv", "ExitCode", "SEGV", 1, rankCrashSaveEvery, 15},
		{"trainjob-kill", "", "KILL", 1, rankCrashSaveEvery, 15},
		{"trainjob-segv", "", "SEGV", 0, rankCrashSaveEvery, 15},
	}
	var mu sync.Mutex
	results := map[string]rankCrashResult{}
	t.Run("jobs", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				var fig string
				var res rankCrashResult
				var err error
				if c.policy == "" {
					fig, res, err = e.rankCrashTrainJob(ctx, t, ns, c)
				} else {
					fig, res, err = e.rankCrashPyTorchJob(ctx, t, ns, c)
				}
				if err != nil {
					e.record("rank crash "+c.name, false, "%s", clip(err.Error()))
					t.Fatal(err)
				}
				mu.Lock()
				results[c.name] = res
				mu.Unlock()
				e.record("rank crash "+c.name, true, "%s", fig)
			})
		}
		t.Run("exitcode-cap", func(t *testing.T) {
			t.Parallel()
			fig, err := e.rankCrashCap(ctx, t, ns)
			if err != nil {
				e.record("rank crash at the cap", false, "%s", clip(err.Error()))
				t.Fatal(err)
			}
			e.record("rank crash at the cap", true, "%s", fig)
		})
	})
	if len(results) == len(cases) {
		fig, err := rankCrashAcross(results)
		e.record("rank crash, all jobs", err == nil, "%s", fig)
		if err != nil {
			t.Error(err)
		}
	}
	if err := e.noBadNode(ctx, ns); err != nil {
		e.record("rank crash", false, "%v", err)
		t.Error(err)
	}
}

// rankCrashAcross asserts what no single job shows (a job far from its
// checkpoint, rank 0 and a worker killed) and prints the figures against
// their targets.
func rankCrashAcross(results map[string]rankCrashResult) (string, error) {
	var all []time.Duration
	far, killed := 0, map[int]bool{}
	for _, r := range results {
		all = append(all, r.trained)
		if r.inProcess {
			killed[r.rank] = true
			far = max(far, r.sinceCkpt)
		}
	}
	slices.Sort(all)
	median := all[len(all)/2]
	if len(all)%2 == 0 {
		median = (all[len(all)/2-1] + all[len(all)/2]) / 2
	}
	fig := fmt.Sprintf("kill → training again: median %s (target ≤ %s), slowest %s (target ≤ %s each); farthest kill from a periodic checkpoint with 0 lost: %d steps",
		median.Round(100*time.Millisecond), rankCrashMedianTarget, all[len(all)-1].Round(100*time.Millisecond), rankCrashTarget, far)
	switch {
	case far < rankCrashFarFromCheckpoint:
		return fig, fmt.Errorf("no in-process job was killed %d or more steps after its last periodic checkpoint (farthest %d): 0 lost does not show a peer's state", rankCrashFarFromCheckpoint, far)
	case !killed[0] || !killed[1]:
		return fig, fmt.Errorf("the in-process jobs killed ranks %v, want rank 0 in one and a worker in another", killed)
	}
	return fig, nil
}

// rankCrashPyTorchJob runs a 2-rank PyTorchJob (master + 1 worker) under
// c.policy with in-process recovery and kills rank c.rank's trainer.
func (e *env) rankCrashPyTorchJob(ctx context.Context, t *testing.T, ns string, c rankCrashCase) (string, rankCrashResult, error) {
	res := rankCrashResult{rank: c.rank, inProcess: true}
	job := "rc-" + c.name
	pj := pytorchJob(ns, job, replica{1, c.policy, ""}, replica{1, c.policy, ""}, false)
	withCommand(pj, trainArgv(2000, 0.3, c.saveEvery))
	pj.SetAnnotations(map[string]string{contract.AnnotationInProcessRecovery: "enabled"})
	if err := e.createJob(ctx, pj); err != nil {
		return "", res, fmt.Errorf("create PyTorchJob: %w", err)
	}
	defer func() { _ = e.dyn.Resource(pytorchJobs).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{}) }()
	master, worker := job+"-master-0", job+"-worker-0"
	victim, survivor, survivorRank := worker, master, 0
	if c.rank == 0 {
		victim, survivor, survivorRank = master, worker, 1
	}
	if err := e.waitStep(ctx, ns, master, c.killAt, 5*time.Minute); err != nil {
		return "", res, err
	}
	before, err := e.podsOf(ctx, ns, master, worker)
	if err != nil {
		return "", res, err
	}
	pidBefore, err := e.rankPID(ctx, ns, survivor, "pytorch", survivorRank)
	if err != nil {
		return "", res, err
	}
	tKill, err := e.killRank(ctx, ns, victim, "pytorch", c.signal, c.rank)
	if err != nil {
		return "", res, err
	}
	t.Logf("%s: rank %d's trainer sent SIG%s at %s", job, c.rank, c.signal, tKill.Format(time.RFC3339Nano))
	var rec inProcessRecovery
	err = poll(ctx, time.Second, 3*time.Minute, func() (bool, error) {
		if cond, err := e.jobCondition(ctx, ns, job); err == nil && cond == "Failed" {
			return false, stop(fmt.Errorf("PyTorchJob %s Failed after the kill", job))
		}
		var ok bool
		rec, ok = parseRecovery(e.logs(ctx, ns, survivor), e.logs(ctx, ns, victim), survivorRank, c.rank, tKill)
		return ok, nil
	})
	if err != nil {
		return "", res, fmt.Errorf("%s: not training again in process after the kill (%s): %w", job, rec.missing, err)
	}
	after, err := e.podsOf(ctx, ns, master, worker)
	if err != nil {
		return "", res, err
	}
	if err := samePods(before, after); err != nil {
		return "", res, fmt.Errorf("%s: %w", job, err)
	}
	for _, name := range []string{master, worker} {
		if code, n := lastExit(after[name], "pytorch"); n != 0 {
			return "", res, fmt.Errorf("%s: its container restarted %d times (last exit %d): the supervisor did not restart the trainer in it", name, n, code)
		}
	}
	if err := e.survivorKept(ctx, ns, job, survivor, "pytorch", c, survivorRank, pidBefore, rec.recovered); err != nil {
		return "", res, err
	}
	res.survivorsPID = true
	if cond, _ := e.jobCondition(ctx, ns, job); cond == "Failed" {
		return "", res, fmt.Errorf("%s Failed", job)
	}
	events, err := e.reschedulerEvents(ctx, ns, job+"-")
	if err != nil {
		return "", res, fmt.Errorf("%s: %w", job, err)
	}
	res.trained = rec.trained.Sub(tKill)
	res.sinceCkpt = rec.resumed % c.saveEvery
	return fmt.Sprintf("%s, in process, SIG%s of rank %d at step %d (%d after its last periodic checkpoint, every %d): kill → training again %s (target %s) = exit seen by the supervisor %s + trainer restart (forked: %v; its code ran %s after the fork), import and join %s + re-forming and the state from rank %d's memory %s + the step %s; 0 steps lost (resumed at step %d); survivor rank %d kept its PID %d; no container restarted, same pods on the same nodes; job not Failed; %s",
		c.policy, c.signal, c.rank, rec.resumed, res.sinceCkpt, c.saveEvery, res.trained.Round(100*time.Millisecond), rankCrashTarget,
		rec.exitSeen.Sub(tKill).Round(100*time.Millisecond), rec.forked != "", rec.forked, rec.joined.Sub(rec.exitSeen).Round(100*time.Millisecond), survivorRank,
		rec.reformed.Sub(rec.joined).Round(100*time.Millisecond), rec.trained.Sub(rec.reformed).Round(100*time.Millisecond),
		rec.resumed, survivorRank, pidBefore, events), res, nil
}

// inProcessRecovery is one rank's in-process recovery as the two pods'
// logs tell it (kubelet timestamps, one clock with the kill's).
type inProcessRecovery struct {
	recovered
	exitSeen time.Time // the victim's supervisor saw its trainer die
	forked   string    // the new trainer's fork → its code, as its supervisor reports it ("" when not forked)
	joined   time.Time // every rank arrived at the new generation (the survivor's figures)
	reformed time.Time // the group re-formed, the state handed on
	trained  time.Time // the survivor's first step after
	missing  string
}

// recovered is what every in-process recovery must show, from the logs.
type recovered struct {
	signal      string // the victim's death, as its supervisor saw it
	survivorPID int    // the survivor's process as it re-formed
	lastBefore  int    // the survivor's last completed step before it re-formed
	resumed     int    // the step the returning rank resumed at
}

// survivorKept: the victim died of the signal sent, the survivor (rank
// survivorRank of pod's container) kept its process (pidBefore) and the
// returning rank resumed at its last completed step.
func (e *env) survivorKept(ctx context.Context, ns, job, pod, container string, c rankCrashCase, survivorRank, pidBefore int, r recovered) error {
	if r.signal != "SIG"+c.signal {
		return fmt.Errorf("%s: the supervisor saw its trainer die of %s, want SIG%s", job, r.signal, c.signal)
	}
	pidAfter, err := e.rankPID(ctx, ns, pod, container, survivorRank)
	if err != nil {
		return err
	}
	if pidBefore != pidAfter || r.survivorPID != pidBefore {
		return fmt.Errorf("%s: the survivor (rank %d) did not keep its process: PID %d before the kill, %d re-forming, %d after", job, survivorRank, pidBefore, r.survivorPID, pidAfter)
	}
	if r.resumed != r.lastBefore {
		return fmt.Errorf("%s: the survivor completed step %d before the kill, the returning rank resumed at step %d: %d steps lost", job, r.lastBefore, r.resumed, r.lastBefore-r.resumed)
	}
	return nil
}

var (
	supervisorRestart = regexp.MustCompile(`^(\S+) trainguard supervise: the trainer \(pid \d+\) died of (\w+); starting it again`)
	supervisorForked  = regexp.MustCompile(`^(\S+) trainguard supervise: forked the trainer \(pid \d+\): its code runs ([\d.]+)s after the fork`)
	reforming         = regexp.MustCompile(`^(\S+) .*trainguard: rank (\d+): a peer is gone .*re-forming the group in this process \(pid (\d+)\)`)
	reformed          = regexp.MustCompile(`^(\S+) .*trainguard: rank (\d+): re-formed the group at generation \d+ in ([\d.]+)s \(waited ([\d.]+)s`)
	peerState         = regexp.MustCompile(`^(\S+) .*trainguard: rank (\d+): the state of step (\d+) from rank \d+'s memory`)
	anyStep           = regexp.MustCompile(`^(\S+) (?:\[\w+\]:)?rank (\d+): completed step (\d+)`)
)

// parseRecovery reads an in-process recovery after t from the survivor's
// and the victim's current logs; ok once the survivor trained again.
func parseRecovery(survivorLog, victimLog string, survivorRank, victimRank int, t time.Time) (rec inProcessRecovery, ok bool) {
	at := func(s string) time.Time { ts, _ := time.Parse(time.RFC3339Nano, s); return ts }
	for _, l := range strings.Split(victimLog, "\n") {
		if m := supervisorRestart.FindStringSubmatch(l); m != nil && rec.exitSeen.IsZero() && at(m[1]).After(t) {
			rec.exitSeen, rec.signal = at(m[1]), m[2]
		}
		if m := supervisorForked.FindStringSubmatch(l); m != nil && !rec.exitSeen.IsZero() && rec.forked == "" {
			rec.forked = m[2] + "s"
		}
		if m := peerState.FindStringSubmatch(l); m != nil && m[2] == strconv.Itoa(victimRank) && at(m[1]).After(t) {
			rec.resumed, _ = strconv.Atoi(m[3])
		}
	}
	if rec.exitSeen.IsZero() {
		rec.missing = "no restart by the victim's supervisor"
		return rec, false
	}
	if rec.resumed == 0 {
		rec.missing = "the returning rank got no state from a peer's memory"
		return rec, false
	}
	for _, l := range strings.Split(survivorLog, "\n") {
		if m := anyStep.FindStringSubmatch(l); m != nil && m[2] == strconv.Itoa(survivorRank) {
			switch {
			case rec.survivorPID == 0: // before it re-formed: the steps the job had
				rec.lastBefore, _ = strconv.Atoi(m[3])
			case !rec.reformed.IsZero() && rec.trained.IsZero():
				rec.trained = at(m[1])
			}
		}
		if m := reforming.FindStringSubmatch(l); m != nil && at(m[1]).After(t) && rec.survivorPID == 0 {
			rec.survivorPID, _ = strconv.Atoi(m[3])
		}
		if m := reformed.FindStringSubmatch(l); m != nil && at(m[1]).After(t) && rec.reformed.IsZero() {
			total, _ := strconv.ParseFloat(m[3], 64)
			waited, _ := strconv.ParseFloat(m[4], 64)
			rec.reformed = at(m[1])
			rec.joined = rec.reformed.Add(-time.Duration((total - waited) * float64(time.Second)))
		}
	}
	switch {
	case rec.survivorPID == 0:
		rec.missing = "the survivor logged no re-forming"
	case rec.reformed.IsZero():
		rec.missing = "the survivor did not re-form the group"
	case rec.trained.IsZero():
		rec.missing = "the survivor completed no step after re-forming"
	}
	return rec, rec.missing == ""
}

// rankCrashTrainJob runs a TrainJob (torchrun, 2 ranks in its trainer pod)
// with in-process recovery and kills rank c.rank's trainer. The webhook has
// torchrun start each worker under the SDK's supervisor (PYTHON_EXEC), and
// the store is torchrun's agent's: the dead trainer's supervisor starts it
// again at once, the survivor keeps its process and hands it the state of
// the last completed step, and torchrun's agent never sees a worker fail
// (it would stop both and start them again from the checkpoint).
func (e *env) rankCrashTrainJob(ctx context.Context, t *testing.T, ns string, c rankCrashCase) (string, rankCrashResult, error) {
	res := rankCrashResult{rank: c.rank, inProcess: true}
	name := "rc-" + c.name
	pod := e.startAnnotatedTrainJob(ctx, t, ns, name, map[string]string{contract.AnnotationInProcessRecovery: "enabled"}, 2000, c.saveEvery, c.killAt)
	defer func() { _ = e.dyn.Resource(trainJobs).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}) }()
	if v := containerEnv(pod, "node", contract.EnvPythonExec); v != contract.EnvPythonExecValue {
		return "", res, fmt.Errorf("%s: %s=%q in the trainer pod, want %s: torchrun's workers are not under the supervisor", name, contract.EnvPythonExec, v, contract.EnvPythonExecValue)
	}
	before, err := e.podsOf(ctx, ns, pod.Name)
	if err != nil {
		return "", res, err
	}
	survivorRank := 1 - c.rank
	pidBefore, err := e.rankPID(ctx, ns, pod.Name, "node", survivorRank)
	if err != nil {
		return "", res, err
	}
	tKill, err := e.killRank(ctx, ns, pod.Name, "node", c.signal, c.rank)
	if err != nil {
		return "", res, err
	}
	t.Logf("%s: rank %d's trainer sent SIG%s at %s", name, c.rank, c.signal, tKill.Format(time.RFC3339Nano))
	var rec torchrunRecovery
	err = poll(ctx, time.Second, 3*time.Minute, func() (bool, error) {
		var ok bool
		rec, ok = parseTorchrunRecovery(e.containerLogs(ctx, ns, pod.Name, "node"), e.workerStderr(ctx, ns, pod.Name), survivorRank, c.rank, tKill)
		return ok, nil
	})
	if err != nil {
		return "", res, fmt.Errorf("%s: not training again in process after the kill (%s): %w", name, rec.missing, err)
	}
	after, err := e.podsOf(ctx, ns, pod.Name)
	if err != nil {
		return "", res, err
	}
	if err := samePods(before, after); err != nil {
		return "", res, fmt.Errorf("%s: %w", name, err)
	}
	if code, n := lastExit(after[pod.Name], "node"); n != 0 {
		return "", res, fmt.Errorf("%s: its container restarted %d times (last exit %d)", name, n, code)
	}
	if rec.agentStopped != "" {
		return "", res, fmt.Errorf("%s: torchrun's agent saw a worker fail and stopped its workers: %q", name, rec.agentStopped)
	}
	if err := e.survivorKept(ctx, ns, name, pod.Name, "node", c, survivorRank, pidBefore, rec.recovered); err != nil {
		return "", res, err
	}
	res.survivorsPID = true
	counts, err := e.disruptionsNotCounted(ctx, ns, name)
	if err != nil {
		return "", res, err
	}
	tj, err := e.dyn.Resource(trainJobs).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", res, err
	}
	if slices.Contains(trueConditions(tj), "Failed") {
		return "", res, fmt.Errorf("TrainJob %s Failed", name)
	}
	res.trained = rec.trained.Sub(tKill)
	res.sinceCkpt = rec.resumed % c.saveEvery
	return fmt.Sprintf("TrainJob (torchrun, 2 ranks in one pod, each worker under the supervisor), in process, SIG%s of rank %d at step %d (%d after its last periodic checkpoint, every %d): kill → training again %s (target %s) = the dead trainer restarted (forked: %v; its code ran %s after the fork), joined, the group re-formed and the state from rank %d's memory %s + the step %s; 0 steps lost (resumed at step %d); survivor rank %d kept its PID %d; torchrun's agent stopped no worker, no container restarted, same pod on the same node; %s",
		c.signal, c.rank, rec.resumed, res.sinceCkpt, c.saveEvery, res.trained.Round(100*time.Millisecond), rankCrashTarget,
		rec.forked != "", rec.forked, survivorRank, rec.resumedAt.Sub(tKill).Round(100*time.Millisecond), rec.trained.Sub(rec.resumedAt).Round(100*time.Millisecond),
		rec.resumed, survivorRank, pidBefore, counts), res, nil
}

// workerStderr is the stderr of torchrun's workers in a TrainJob's pod (the
// supervisors' lines and the SDK's log): torchrun keeps it in its log
// directory (see torchrun).
func (e *env) workerStderr(ctx context.Context, ns, pod string) string {
	out, _ := e.kubectl(ctx, "exec", "-n", ns, pod, "-c", "node", "--", "sh", "-c", "cat /tmp/torchrun/*/attempt_*/*/stderr.log")
	return out
}

// containerEnv is the value of env var name in the pod's container.
func containerEnv(p *corev1.Pod, container, name string) string {
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, ev := range c.Env {
			if ev.Name == name {
				return ev.Value
			}
		}
	}
	return ""
}

// torchrunRecovery is one rank's in-process recovery under torchrun: the
// container log (torchrun's own lines and the workers' stdout, kubelet
// timestamps) and the workers' stderr (no timestamps) tell it.
type torchrunRecovery struct {
	recovered
	forked       string    // the new trainer's fork → its code ("" when not forked)
	resumedAt    time.Time // the returning rank resumed from its peer's state
	trained      time.Time // the returning rank's first step after
	agentStopped string    // a line of torchrun's agent stopping its workers after the kill
	missing      string
}

var (
	torchrunDied      = regexp.MustCompile(`trainguard supervise: the trainer \(pid \d+\) died of (\w+); starting it again`)
	torchrunForked    = regexp.MustCompile(`trainguard supervise: forked the trainer \(pid \d+\): its code runs ([\d.]+)s after the fork, at generation ([2-9]|\d\d+)`)
	torchrunReforming = regexp.MustCompile(`trainguard: rank (\d+): a peer is gone .*re-forming the group in this process \(pid (\d+)\) after step (\d+)`)
	agentStopping     = regexp.MustCompile(`^(\S+) .*(closing signal|failed \(exitcode)`)
)

// parseTorchrunRecovery reads an in-process recovery under torchrun after t;
// ok once the returning rank trained again.
func parseTorchrunRecovery(log, stderr string, survivorRank, victimRank int, t time.Time) (rec torchrunRecovery, ok bool) {
	at := func(s string) time.Time { ts, _ := time.Parse(time.RFC3339Nano, s); return ts }
	if m := torchrunDied.FindStringSubmatch(stderr); m != nil {
		rec.signal = m[1]
	}
	if m := torchrunForked.FindStringSubmatch(stderr); m != nil {
		rec.forked = m[1] + "s"
	}
	for _, m := range torchrunReforming.FindAllStringSubmatch(stderr, -1) {
		if m[1] == strconv.Itoa(survivorRank) {
			rec.survivorPID, _ = strconv.Atoi(m[2])
			rec.lastBefore, _ = strconv.Atoi(m[3])
		}
	}
	for _, l := range strings.Split(log, "\n") {
		if m := agentStopping.FindStringSubmatch(l); m != nil && at(m[1]).After(t) && rec.agentStopped == "" {
			rec.agentStopped = l
		}
		if m := anyResumed.FindStringSubmatch(l); m != nil && m[2] == strconv.Itoa(victimRank) && at(m[1]).After(t) && rec.resumedAt.IsZero() {
			rec.resumedAt = at(m[1])
			rec.resumed, _ = strconv.Atoi(m[3])
		}
		if m := anyStep.FindStringSubmatch(l); m != nil && m[2] == strconv.Itoa(victimRank) && !rec.resumedAt.IsZero() && rec.trained.IsZero() {
			rec.trained = at(m[1])
		}
	}
	switch {
	case rec.signal == "":
		rec.missing = "no restart by the victim's supervisor"
	case rec.survivorPID == 0:
		rec.missing = "the survivor logged no re-forming"
	case rec.resumedAt.IsZero():
		rec.missing = "the returning rank did not resume"
	case rec.trained.IsZero():
		rec.missing = "the returning rank completed no step after resuming"
	}
	return rec, rec.missing == ""
}

// capCount is the in-place restarts an InPlaceRestartCapReached Event
// counts against a cap of 1.
var capCount = regexp.MustCompile(`\((\d+)/1, `)

// segvLoopScript segfaults two seconds after every start, as a bug in a
// native kernel would. The shell execs python3, so under trainguard's
// supervisor the fault is its child's own signal death (the supervisor
// restarts it in the container); the supervisor exits 139.
const segvLoopScript = `exec python3 -c 'import ctypes, time; time.sleep(2); ctypes.string_at(0)'`

// rankCrashCap (bounded): a PyTorchJob under restartPolicy Never with
// trainguard.io/max-reschedules=1 and in-process recovery whose worker
// segfaults on every start. Its supervisor restarts it in the container
// once (the budget the webhook gives it is the cap), then exits 139 and
// reports the restart, which counts toward the cap: the rescheduler stops
// the job's in-place restarts (Warning InPlaceRestartCapReached on the
// job, the stop in its record, the pod evicted once, no bad node), the
// worker's replacement has no restart rules and a supervisor budget of 0,
// and the job ends by the operator's own policy (Never: Failed), not
// restarted for ever.
func (e *env) rankCrashCap(ctx context.Context, t *testing.T, ns string) (string, error) {
	const job = "rc-cap"
	pj := pytorchJob(ns, job, replica{1, "Never", sleepScript}, replica{1, "Never", segvLoopScript}, false)
	pj.SetAnnotations(map[string]string{"trainguard.io/max-reschedules": "1", contract.AnnotationInProcessRecovery: "enabled"})
	start := time.Now()
	if err := e.createJob(ctx, pj); err != nil {
		return "", fmt.Errorf("create PyTorchJob: %w", err)
	}
	defer func() { _ = e.dyn.Resource(pytorchJobs).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{}) }()
	worker := job + "-worker-0"
	var first *corev1.Pod
	var maxRestarts, inProcess int32 // the kubelet's restarts of the first worker, its supervisor's
	err := poll(ctx, time.Second, 4*time.Minute, func() (bool, error) {
		if p, _ := e.pod(ctx, ns, worker); p != nil {
			if first == nil {
				first = p
			}
			if p.UID == first.UID {
				_, n := lastExit(p, "pytorch")
				maxRestarts = max(maxRestarts, n)
				inProcess = max(inProcess, supervisorRestarts(p))
			}
		}
		cond, err := e.jobCondition(ctx, ns, job)
		return err == nil && cond == "Failed", nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: not Failed by its restartPolicy Never after the cap (the first worker restarted %d times): %w", job, maxRestarts, err)
	}
	ended := time.Since(start)
	if first == nil || len(first.Spec.Containers[0].RestartPolicyRules) == 0 {
		return "", fmt.Errorf("%s: the first worker pod had no restart rules (restartPolicy Never)", job)
	}
	if maxRestarts+inProcess > 2 {
		return "", fmt.Errorf("%s: the first worker restarted in place %d times by the kubelet and %d by its supervisor, past the cap of 1", job, maxRestarts, inProcess)
	}
	if p, _ := e.pod(ctx, ns, worker); p != nil && p.UID != first.UID && len(p.Spec.Containers[0].RestartPolicyRules) > 0 {
		return "", fmt.Errorf("%s: the worker's replacement got restart rules after the cap", job)
	}
	// The recorder writes Events in the background: the job may be Failed
	// before its Event is there.
	note := ""
	_ = poll(ctx, time.Second, 30*time.Second, func() (bool, error) {
		evs, err := e.cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Regarding.Kind == "PyTorchJob" && ev.Regarding.Name == job && ev.Reason == "InPlaceRestartCapReached" && ev.Type == corev1.EventTypeWarning {
				note = ev.Note
			}
		}
		return note != "", nil
	})
	// The count the rescheduler saw: the supervisor's restart (1/1), and
	// the kubelet's one after it when the kubelet restarted the container
	// before the rescheduler looked (2/1); never more than restarted.
	m := capCount.FindStringSubmatch(note)
	if m == nil {
		return "", fmt.Errorf("%s: no Warning InPlaceRestartCapReached Event on the job naming the cap of 1 (got %q)", job, note)
	}
	if n, _ := strconv.Atoi(m[1]); n < 1 || n > int(maxRestarts+inProcess) {
		return "", fmt.Errorf("%s: the cap's Event counts %d in-place restarts, the first worker made %d (kubelet %d, supervisor %d): %q", job, n, maxRestarts+inProcess, maxRestarts, inProcess, note)
	}
	cms, err := e.cs.CoreV1().ConfigMaps(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "trainguard.io/bad-nodes=true"})
	if err != nil {
		return "", err
	}
	stopped := false
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "bad-nodes-"+ns+"."+job+"-") {
			stopped = cm.Data["inPlaceStopped"] == "true"
		}
	}
	if !stopped {
		return "", fmt.Errorf("%s: the job's record does not say its in-place restarts stopped", job)
	}
	return fmt.Sprintf("Never, max-reschedules 1, in-process recovery, worker SIGSEGV on every start: restarted in its container %d time(s) by its supervisor, %d by the kubelet, then InPlaceRestartCapReached on the job (%q), the stop recorded, no restart rules on new pods; the job Failed by its own policy %s after its creation",
		inProcess, maxRestarts, clip(note), ended.Round(time.Second)), nil
}

// supervisorRestarts is the restarts the training container's supervisor
// reported in its termination messages (contract.InProcessRestartsLine).
func supervisorRestarts(p *corev1.Pod) int32 {
	n := 0
	for _, s := range p.Status.ContainerStatuses {
		for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
			if s.Name == "pytorch" && t != nil {
				n = max(n, contract.InProcessRestarts(t.Message))
			}
		}
	}
	return int32(n) //nolint:gosec // at most 1000
}

func signalExit(sig string) int32 {
	if sig == "SEGV" {
		return 139
	}
	return 137
}

// killRank signals rank's trainer in pod/container and returns when
// the signal was sent. The script prints the trainer's PID once it sent
// the signal; the exec session may then die with the container (the
// trainer is its main process: exit 137 from kubectl), which is not a
// failure to send it.
func (e *env) killRank(ctx context.Context, ns, pod, container, signal string, rank int) (time.Time, error) {
	t := time.Now()
	out, err := e.kubectl(ctx, "exec", "-n", ns, pod, "-c", container, "--", "python3", "-c", killRankScript, signal, strconv.Itoa(rank))
	if err != nil && !signalSent(out) {
		return t, fmt.Errorf("kill rank %d in %s: %w (%s)", rank, pod, err, out)
	}
	return t, nil
}

// killRankScript is goodput.KillRankScript for a trainer under the
// supervisor: the supervisor's command line (and that of its store's
// process) holds the trainer's command too, after "-m trainguard supervise
// --" or, under torchrun, "trainguard-python", so such a process is not the
// trainer.
var killRankScript = func() string {
	const trainer = `b"torch.distributed.run" not in argv`
	if !strings.Contains(goodput.KillRankScript, trainer) {
		panic("goodput.KillRankScript changed: update killRankScript")
	}
	return strings.Replace(goodput.KillRankScript, trainer, trainer+` and b"trainguard" not in argv and not any(a.endswith(b"/trainguard-python") for a in argv)`, 1)
}()

// rankPID is the PID of rank's trainer in pod's container:
// KillRankScript's search, signal 0 (none sent).
func (e *env) rankPID(ctx context.Context, ns, pod, container string, rank int) (int, error) {
	out, err := e.kubectl(ctx, "exec", "-n", ns, pod, "-c", container, "--", "python3", "-c", killRankScript, "0", strconv.Itoa(rank))
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	pid, perr := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || perr != nil {
		return 0, fmt.Errorf("rank %d's trainer PID in %s: %v (%s)", rank, pod, err, out)
	}
	return pid, nil
}

// signalSent says the kill script's output starts with the PID it signalled.
func signalSent(out string) bool {
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	_, err := strconv.Atoi(strings.TrimSpace(first))
	return err == nil
}

// podRef is what must not change across an in-place restart.
type podRef struct {
	uid  types.UID
	node string
}

// podsOf returns the named pods (all must exist).
func (e *env) podsOf(ctx context.Context, ns string, names ...string) (map[string]*corev1.Pod, error) {
	out := map[string]*corev1.Pod{}
	for _, n := range names {
		p, err := e.pod(ctx, ns, n)
		if err != nil || p == nil {
			return nil, fmt.Errorf("pod %s/%s: %v (absent: %t)", ns, n, err, p == nil)
		}
		out[n] = p
	}
	return out, nil
}

// samePods: every pod is still the same pod (UID) on the same node: nothing
// was evicted, recreated or moved.
func samePods(before, after map[string]*corev1.Pod) error {
	for n, b := range before {
		a := after[n]
		was, is := podRef{b.UID, b.Spec.NodeName}, podRef{a.UID, a.Spec.NodeName}
		if was != is {
			return fmt.Errorf("pod %s was replaced or moved: %v → %v", n, was, is)
		}
	}
	return nil
}

// lastExit is the container's exit code before its latest restart and its
// restart count (-1, 0 when it never restarted).
func lastExit(p *corev1.Pod, container string) (int32, int32) {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			if t := s.LastTerminationState.Terminated; t != nil {
				return t.ExitCode, s.RestartCount
			}
			return -1, s.RestartCount
		}
	}
	return -1, 0
}

// anyResumed matches every rank's resume line: its rank and step.
var anyResumed = regexp.MustCompile(`^(\S+) (?:\[\w+\]:)?rank (\d+): resumed from \S+ at step (\d+)`)

// reschedulerEvents sums up trainguard's decisions about the pods named
// prefix*: an in-place restart is a RestartInPlace Event (when the
// rescheduler saw the container stopped), never an eviction, never a
// permanent failure.
func (e *env) reschedulerEvents(ctx context.Context, ns, prefix string) (string, error) {
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	count := map[string]int{}
	for _, ev := range evs.Items {
		if strings.HasPrefix(ev.InvolvedObject.Name, prefix) && ev.InvolvedObject.Kind == "Pod" {
			switch ev.Reason {
			case "RestartInPlace", "GracefulDelete", "ForceDelete", "RetryableExit", "PermanentFailure":
				count[ev.Reason]++
			}
		}
	}
	if n := count["GracefulDelete"] + count["ForceDelete"] + count["PermanentFailure"]; n > 0 {
		return "", fmt.Errorf("trainguard evicted a pod or called its exit permanent: Events %v", count)
	}
	return fmt.Sprintf("trainguard Events %v", count), nil
}
