//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainguard/trainguard/test/goodput"
)

// rankCrashCase is one job of the rank-crash scenario: its kind (a
// PyTorchJob under a restart policy, or a TrainJob) and how its rank 1
// trainer dies.
type rankCrashCase struct {
	name   string
	policy string // PyTorchJob restartPolicy; "" for a TrainJob
	signal string // KILL (137, as the OOM killer) or SEGV (139)
}

const (
	rankCrashSaveEvery = 10
	// rankCrashTarget is the target from the kill to training again.
	rankCrashTarget = 10 * time.Second
)

// rankCrash: one rank's trainer dies mid-training, killed
// (SIGKILL, 137, as the OOM killer does) or crashing (SIGSEGV, 139). Under
// every restart policy users write (a PyTorchJob under OnFailure and under
// ExitCode, a TrainJob through torchrun) the whole job trains again, in
// place, within seconds: the survivor's collective fails and the SDK ends it
// retryably (138) after rank 0 committed the last completed step (the dying
// gasp), the kubelet restarts both containers where they are (OnFailure, or
// trainguard's container restart rules under ExitCode's Never), torchrun
// restarts its workers itself (PET_MAX_RESTARTS). Asserted for each job:
// never Failed, every rank resumed at the same step, the pods are the same
// pods on the same nodes (the operator and the Job retried nothing, the
// JobSet did not restart), no bad node recorded. A seventh job's rank
// segfaults on every start (a bug, not a fault): its in-place restarts
// stop at the job's cap (rankCrashCap). The seven jobs run side by side.
func (e *env) rankCrash(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-rank-crash", true)
	cases := []rankCrashCase{
		{"onfailure-kill", "OnFailure", "KILL"},
		{"onfailure-segv", "OnFailure", "SEGV"},
		{"exitcode-kill", "ExitCode", "KILL"},
		{"exitcode-segv", "ExitCode", "SEGV"},
		{"trainjob-kill", "", "KILL"},
		{"trainjob-segv", "", "SEGV"},
	}
	t.Run("jobs", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				var fig string
				var err error
				if c.policy == "" {
					fig, err = e.rankCrashTrainJob(ctx, t, ns, c)
				} else {
					fig, err = e.rankCrashPyTorchJob(ctx, t, ns, c)
				}
				if err != nil {
					e.record("rank crash "+c.name, false, "%s", clip(err.Error()))
					t.Fatal(err)
				}
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
	if err := e.noBadNode(ctx, ns); err != nil {
		e.record("rank crash", false, "%v", err)
		t.Error(err)
	}
}

// rankCrashPyTorchJob runs a 2-rank PyTorchJob (master + 1 worker) under
// c.policy and kills the worker's trainer.
func (e *env) rankCrashPyTorchJob(ctx context.Context, t *testing.T, ns string, c rankCrashCase) (string, error) {
	job := "rc-" + c.name
	script := trainScript(job, 2000, 0.3, rankCrashSaveEvery)
	if err := e.createJob(ctx, pytorchJob(ns, job, replica{1, c.policy, script}, replica{1, c.policy, script}, false)); err != nil {
		return "", fmt.Errorf("create PyTorchJob: %w", err)
	}
	defer func() { _ = e.dyn.Resource(pytorchJobs).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{}) }()
	master, worker := job+"-master-0", job+"-worker-0"
	if err := e.waitStep(ctx, ns, master, 15, 5*time.Minute); err != nil {
		return "", err
	}
	before, err := e.podsOf(ctx, ns, master, worker)
	if err != nil {
		return "", err
	}
	tKill, err := e.killRank(ctx, ns, worker, "pytorch", c.signal)
	if err != nil {
		return "", err
	}
	t.Logf("%s: rank 1's trainer sent SIG%s at %s", job, c.signal, tKill.Format(time.RFC3339Nano))
	var trained time.Time
	err = poll(ctx, time.Second, 3*time.Minute, func() (bool, error) {
		if cond, err := e.jobCondition(ctx, ns, job); err == nil && cond == "Failed" {
			return false, stop(fmt.Errorf("PyTorchJob %s Failed after the kill", job))
		}
		ts, _, ok := firstStepAfterResume(e.logs(ctx, ns, master), tKill)
		trained = ts
		return ok, nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: rank 0 not training again after the kill: %w", job, err)
	}
	after, err := e.podsOf(ctx, ns, master, worker)
	if err != nil {
		return "", err
	}
	if err := samePods(before, after); err != nil {
		return "", fmt.Errorf("%s: %w", job, err)
	}
	want := map[string]int32{worker: signalExit(c.signal), master: 138}
	restarts := []string{}
	for _, name := range []string{master, worker} {
		p := after[name]
		code, n := lastExit(p, "pytorch")
		if code != want[name] {
			return "", fmt.Errorf("%s: container exited %d before its restart, want %d", name, code, want[name])
		}
		restarts = append(restarts, fmt.Sprintf("%s exit %d, restarted in place (%d)", strings.TrimPrefix(name, job+"-"), code, n))
	}
	resumed, err := e.sameResume(ctx, ns, tKill, map[string]string{master: "pytorch", worker: "pytorch"})
	if err != nil {
		return "", fmt.Errorf("%s: %w", job, err)
	}
	lost := e.lostSteps(ctx, ns, master, "pytorch", true, resumed)
	if cond, _ := e.jobCondition(ctx, ns, job); cond == "Failed" {
		return "", fmt.Errorf("%s Failed", job)
	}
	events, err := e.reschedulerEvents(ctx, ns, job+"-")
	if err != nil {
		return "", fmt.Errorf("%s: %w", job, err)
	}
	budget := "the operator retried nothing (ExitCode: its retries are new pods)"
	if c.policy == "OnFailure" {
		budget = "the operator recreated nothing (OnFailure: kubeflow counts the kubelet's restarts against backoffLimit)"
	}
	return fmt.Sprintf("%s, SIG%s of rank 1: kill → training again %s (target %s); every rank resumed at step %d; %s; %s; same pods on the same nodes, %s; job not Failed; %s",
		c.policy, c.signal, trained.Sub(tKill).Round(100*time.Millisecond), rankCrashTarget, resumed, lost,
		strings.Join(restarts, ", "), budget, events), nil
}

// rankCrashTrainJob runs a TrainJob (torchrun, 2 ranks in its trainer pod)
// and kills rank 1.
func (e *env) rankCrashTrainJob(ctx context.Context, t *testing.T, ns string, c rankCrashCase) (string, error) {
	name := "rc-" + c.name
	pod := e.startTrainJob(ctx, t, ns, name, 2000, rankCrashSaveEvery, 15)
	defer func() { _ = e.dyn.Resource(trainJobs).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}) }()
	before, err := e.podsOf(ctx, ns, pod.Name)
	if err != nil {
		return "", err
	}
	tKill, err := e.killRank(ctx, ns, pod.Name, "node", c.signal)
	if err != nil {
		return "", err
	}
	t.Logf("%s: rank 1's trainer sent SIG%s at %s", name, c.signal, tKill.Format(time.RFC3339Nano))
	var trained time.Time
	err = poll(ctx, time.Second, 3*time.Minute, func() (bool, error) {
		ts, _, ok := firstStepAfterResume(e.containerLogs(ctx, ns, pod.Name, "node"), tKill)
		trained = ts
		return ok, nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: rank 0 not training again after the kill: %w", name, err)
	}
	after, err := e.podsOf(ctx, ns, pod.Name)
	if err != nil {
		return "", err
	}
	if err := samePods(before, after); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	_, containerRestarts := lastExit(after[pod.Name], "node")
	resumed, err := e.sameResume(ctx, ns, tKill, map[string]string{pod.Name: "node"})
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	lost := e.lostSteps(ctx, ns, pod.Name, "node", false, resumed)
	counts, err := e.disruptionsNotCounted(ctx, ns, name)
	if err != nil {
		return "", err
	}
	tj, err := e.dyn.Resource(trainJobs).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if slices.Contains(trueConditions(tj), "Failed") {
		return "", fmt.Errorf("TrainJob %s Failed", name)
	}
	return fmt.Sprintf("TrainJob (torchrun, 2 ranks), SIG%s of rank 1: kill → training again %s (target %s); every rank resumed at step %d; %s; torchrun restarted its workers, container restarts %d, same pod on the same node; %s",
		c.signal, trained.Sub(tKill).Round(100*time.Millisecond), rankCrashTarget, resumed, lost, containerRestarts, counts), nil
}

// segvLoopScript segfaults two seconds after every start, as a bug in a
// native kernel would. python3 is not PID 1 (sh waits for it), and the
// fault is a real one: sh exits 139.
const segvLoopScript = `python3 -c 'import ctypes, time; time.sleep(2); ctypes.string_at(0)'; exit $?`

// rankCrashCap (bounded): a PyTorchJob under restartPolicy Never
// with trainguard.io/max-reschedules=1 whose worker segfaults on every
// start. trainguard's restart rules restart it in place once; at the cap
// the rescheduler stops the job's in-place restarts (Warning
// InPlaceRestartCapReached on the job, the stop in its record, the pod
// evicted once, no bad node), the worker's replacement has no restart
// rules, and the job ends by the operator's own policy (Never: Failed),
// not restarted for ever.
func (e *env) rankCrashCap(ctx context.Context, t *testing.T, ns string) (string, error) {
	const job = "rc-cap"
	pj := pytorchJob(ns, job, replica{1, "Never", sleepScript}, replica{1, "Never", segvLoopScript}, false)
	pj.SetAnnotations(map[string]string{"trainguard.io/max-reschedules": "1"})
	start := time.Now()
	if err := e.createJob(ctx, pj); err != nil {
		return "", fmt.Errorf("create PyTorchJob: %w", err)
	}
	defer func() { _ = e.dyn.Resource(pytorchJobs).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{}) }()
	worker := job + "-worker-0"
	var first *corev1.Pod
	var maxRestarts int32
	err := poll(ctx, time.Second, 4*time.Minute, func() (bool, error) {
		if p, _ := e.pod(ctx, ns, worker); p != nil {
			if first == nil {
				first = p
			}
			if p.UID == first.UID {
				_, n := lastExit(p, "pytorch")
				maxRestarts = max(maxRestarts, n)
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
	if maxRestarts > 2 {
		return "", fmt.Errorf("%s: the first worker restarted in place %d times, past the cap of 1", job, maxRestarts)
	}
	if p, _ := e.pod(ctx, ns, worker); p != nil && p.UID != first.UID && len(p.Spec.Containers[0].RestartPolicyRules) > 0 {
		return "", fmt.Errorf("%s: the worker's replacement got restart rules after the cap", job)
	}
	evs, err := e.cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	note := ""
	for _, ev := range evs.Items {
		if ev.Regarding.Kind == "PyTorchJob" && ev.Regarding.Name == job && ev.Reason == "InPlaceRestartCapReached" && ev.Type == corev1.EventTypeWarning {
			note = ev.Note
		}
	}
	if !strings.Contains(note, "(1/1") {
		return "", fmt.Errorf("%s: no Warning InPlaceRestartCapReached Event on the job naming 1/1 (got %q)", job, note)
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
	return fmt.Sprintf("Never, max-reschedules 1, worker SIGSEGV on every start: restarted in place %d time(s), then InPlaceRestartCapReached on the job (%q), the stop recorded, no restart rules on new pods; the job Failed by its own policy %s after its creation",
		maxRestarts, clip(note), ended.Round(time.Second)), nil
}

func signalExit(sig string) int32 {
	if sig == "SEGV" {
		return 139
	}
	return 137
}

// killRank signals the rank 1 trainer in pod/container and returns when
// the signal was sent. The script prints the trainer's PID once it sent
// the signal; the exec session may then die with the container (the
// trainer is its main process: exit 137 from kubectl), which is not a
// failure to send it.
func (e *env) killRank(ctx context.Context, ns, pod, container, signal string) (time.Time, error) {
	t := time.Now()
	out, err := e.kubectl(ctx, "exec", "-n", ns, pod, "-c", container, "--", "python3", "-c", goodput.KillRankScript, signal, "1")
	if err != nil && !signalSent(out) {
		return t, fmt.Errorf("kill rank 1 in %s: %w (%s)", pod, err, out)
	}
	return t, nil
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

// firstStepAfterResume is the time and number of rank 0's first completed
// step after its first resume logged after t: the restarted incarnation's,
// never a step the old one finished while its peer was dying.
func firstStepAfterResume(log string, t time.Time) (time.Time, int, bool) {
	resumedAt := time.Time{}
	for _, l := range strings.Split(log, "\n") {
		if m := rank0Resumed.FindStringSubmatch(l); m != nil && resumedAt.IsZero() {
			if ts, err := time.Parse(time.RFC3339Nano, m[1]); err == nil && ts.After(t) {
				resumedAt = ts
			}
		}
	}
	if resumedAt.IsZero() {
		return time.Time{}, 0, false
	}
	return firstStepAfter(log, resumedAt)
}

var rank0Resumed = regexp.MustCompile(`^(\S+) (?:\[\w+\]:)?rank 0: resumed from \S+ at step (\d+)`)

// anyResumed matches every rank's resume line: its rank and step.
var anyResumed = regexp.MustCompile(`^(\S+) (?:\[\w+\]:)?rank (\d+): resumed from \S+ at step (\d+)`)

// sameResume: every rank (the resume lines after t in the containers'
// current logs) resumed at one step, which it returns; both ranks must have
// resumed.
func (e *env) sameResume(ctx context.Context, ns string, t time.Time, containers map[string]string) (int, error) {
	steps := map[string]int{}
	for pod, c := range containers {
		for _, l := range strings.Split(e.containerLogs(ctx, ns, pod, c), "\n") {
			m := anyResumed.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			if ts, err := time.Parse(time.RFC3339Nano, m[1]); err == nil && ts.After(t) {
				if _, seen := steps[m[2]]; !seen {
					steps[m[2]], _ = strconv.Atoi(m[3])
				}
			}
		}
	}
	if len(steps) != 2 {
		return 0, fmt.Errorf("resume lines after the kill from ranks %v, want ranks 0 and 1", steps)
	}
	if steps["0"] != steps["1"] {
		return 0, fmt.Errorf("ranks resumed at different steps: %v", steps)
	}
	return steps["0"], nil
}

// lostSteps compares the last step rank 0 completed before the kill with the
// step every rank resumed at. previous: rank 0's container restarted (its
// earlier steps are in the previous log); otherwise its process restarted
// inside the same container (torchrun).
func (e *env) lostSteps(ctx context.Context, ns, pod, container string, previous bool, resumed int) string {
	log := e.containerLogs(ctx, ns, pod, container)
	if previous {
		raw, err := e.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: true, Timestamps: true}).DoRaw(ctx)
		if err != nil {
			return fmt.Sprintf("steps lost unknown (previous log: %v)", err)
		}
		log = string(raw)
	} else {
		log = lastResumeCut(log) // the steps before the restarted workers' resume
	}
	last := lastStep(log)
	return fmt.Sprintf("last step completed before the crash %d: %d steps lost", last, max(last-resumed, 0))
}

// lastResumeCut is the log up to its last rank 0 resume line.
func lastResumeCut(log string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if rank0Resumed.MatchString(lines[i]) {
			return strings.Join(lines[:i], "\n")
		}
	}
	return log
}

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
