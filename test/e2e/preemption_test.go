//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Fixed by hack/cluster/manifests/kueue-queues.yaml.
const (
	kueueClusterQueue = "training"
	kueueLow          = "training-low"
	kueueHigh         = "training-high"
	queueLabel        = "kueue.x-k8s.io/queue-name"
	priorityLabel     = "kueue.x-k8s.io/priority-class"
	// Steps of the preempted (low) and the preempting (high) jobs.
	lowSteps  = 80
	highSteps = 20
	// schedSteps outlasts a 60 s grace period after the preemption, so a
	// preempted rank that trains on until SIGKILL cannot finish the job.
	schedSteps = 300
)

var (
	localQueues = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	workloads   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
)

// pid1Command runs the example trainer as the container's PID 1, as most
// users write it (`command: [python3, train.py]`): a short python3 makes the
// dump directory and exec()s the trainer in its place. A PID 1 without its
// own SIGTERM handler ignores the kubelet's SIGTERM, so how fast a preempted
// pod goes is up to the trainer's own exit after its checkpoint.
func pid1Command(job string, steps int, delay float64) []any {
	d := "/checkpoint/e2e-dumps/" + job
	return []any{"python3", "-c", "import os, sys; os.makedirs(sys.argv[1], exist_ok=True); os.execvp(sys.argv[2], sys.argv[2:])",
		d, "python3", "/opt/trainguard/trainer/train.py", "--steps", fmt.Sprint(steps), "--step-delay", fmt.Sprint(delay),
		"--save-every", "0", "--dump-state", d + "/resumed", "--dump-final", d + "/final"}
}

// queuedPyTorchJob is a two-rank PyTorchJob (master + one worker) whose
// trainer is PID 1, submitted to Kueue's local queue at a priority.
func queuedPyTorchJob(ns, name, priority string, steps int, delay float64, cpu string) *unstructured.Unstructured {
	job := pytorchJob(ns, name, replica{count: 1, restartPolicy: "OnFailure"}, replica{count: 1, restartPolicy: "OnFailure"}, false)
	job.SetLabels(map[string]string{queueLabel: kueueClusterQueue, priorityLabel: priority})
	withPID1Trainer(job, steps, delay, cpu)
	return job
}

// withPID1Trainer makes every replica's container run the trainer as PID 1
// (pid1Command), asking for cpu when set.
func withPID1Trainer(job *unstructured.Unstructured, steps int, delay float64, cpu string) {
	replicas, _, _ := unstructured.NestedMap(job.Object, "spec", "pytorchReplicaSpecs")
	for rt := range replicas {
		c := []string{"spec", "pytorchReplicaSpecs", rt, "template", "spec", "containers"}
		containers, _, _ := unstructured.NestedSlice(job.Object, c...)
		ctr := containers[0].(map[string]any)
		ctr["command"] = pid1Command(job.GetName(), steps, delay)
		if cpu != "" {
			ctr["resources"] = map[string]any{"requests": map[string]any{"cpu": cpu, "memory": "200Mi"}}
		}
		_ = unstructured.SetNestedSlice(job.Object, containers, c...)
	}
}

// victim follows one pod of a preempted job until it is gone.
type victim struct {
	name, node string
	uid        types.UID
	grace      int64
	gone       time.Time
	disruption string // DisruptionTarget condition reason, if seen
}

// observeVictims looks at each victim once: disrupted (and why), gone.
func (e *env) observeVictims(ctx context.Context, ns string, vs []*victim) error {
	for _, v := range vs {
		if !v.gone.IsZero() {
			continue
		}
		p, err := e.pod(ctx, ns, v.name)
		if err != nil {
			return err
		}
		if p != nil && p.UID == v.uid {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
					v.disruption = c.Reason
				}
			}
		}
		// Gone: deleted, replaced, or stopped (a terminal phase frees its
		// resources for the scheduler before the object is removed).
		if p == nil || p.UID != v.uid || (p.DeletionTimestamp != nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded)) {
			v.gone = time.Now()
		}
	}
	return nil
}

func victimsOf(pods []corev1.Pod) []*victim {
	var vs []*victim
	for _, p := range pods {
		g := int64(30)
		if p.Spec.TerminationGracePeriodSeconds != nil {
			g = *p.Spec.TerminationGracePeriodSeconds
		}
		vs = append(vs, &victim{name: p.Name, node: p.Spec.NodeName, uid: p.UID, grace: g})
	}
	return vs
}

// preemptionFigures is what every preemption scenario checks and prints.
type preemptionFigures struct {
	kind, ns, job, jobDir string
	ranks                 int
	arrived               time.Time // the high-priority job or pod was created
	highRunning           time.Time // all its pods running
	readmitted            time.Time // the preempted job may run again
	trainingAgain         time.Time // its first step after that
	victims               []*victim
	before                []sample // trainguard_checkpoint_total before the preemption
}

// check asserts the outcome: the resumed state is the acknowledged
// checkpoint on every rank (0 steps lost), the checkpoint finished inside
// each victim's grace period, a CheckpointSaved Event naming the preemption
// on the job, no bad node recorded, and the outcome metric counted it. It
// returns the table's figures.
func (f *preemptionFigures) check(ctx context.Context, e *env, cause string) (string, error) {
	resume, err := e.drainFigures(f.jobDir, f.job, f.arrived, f.ranks)
	if err != nil {
		return "", err
	}
	ack, ackPath, _, err := newestAckBefore(f.jobDir, f.trainingAgain)
	if err != nil {
		return "", err
	}
	req, _, err := newestJSON(filepath.Dir(ackPath), "request.json")
	if err != nil {
		return "", err
	}
	preStop := floatTime(num(req, "requested_at"))
	acked := floatTime(num(ack, "acked_at"))
	var gone []string
	for _, v := range f.victims {
		if v.gone.IsZero() {
			return "", fmt.Errorf("pod %s of the preempted job never went away", v.name)
		}
		if limit := preStop.Add(time.Duration(v.grace) * time.Second); acked.After(limit) {
			return "", fmt.Errorf("pod %s: the checkpoint was acknowledged %s after the preStop hook started, past its terminationGracePeriodSeconds %d",
				v.name, acked.Sub(preStop).Round(time.Millisecond), v.grace)
		}
		gone = append(gone, fmt.Sprintf("%s %.1f s (grace %d s)", v.name, v.gone.Sub(preStop).Seconds(), v.grace))
	}
	figures := fmt.Sprintf("%s; preStop→pod gone: %s; preemption → high-priority job running %s; readmission → training again %s",
		resume, strings.Join(gone, ", "), f.highRunning.Sub(f.arrived).Round(100*time.Millisecond),
		f.trainingAgain.Sub(f.readmitted).Round(100*time.Millisecond))
	// The rest is reported together, with the figures, so a failing row still shows them.
	var errs []error
	if event, err := e.preemptionEvent(ctx, f.ns, f.kind, f.job, cause); err != nil {
		errs = append(errs, err)
	} else {
		figures += "; Event: " + event
	}
	if counted, err := e.preemptionCounted(ctx, f.ns, f.before); err != nil {
		errs = append(errs, err)
	} else {
		figures += "; " + counted
	}
	if err := e.noBadNode(ctx, f.ns); err != nil {
		errs = append(errs, err)
	} else {
		figures += "; no bad node recorded"
	}
	return figures, errors.Join(errs...)
}

func floatTime(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

// preemptionEvent waits for the CheckpointSaved Event on the job whose
// message names the preemption (cause: "preempted by Kueue" or "preempted by
// kube-scheduler").
func (e *env) preemptionEvent(ctx context.Context, ns, kind, job, cause string) (string, error) {
	var msg string
	seen := map[string]bool{}
	err := poll(ctx, 2*time.Second, 90*time.Second, func() (bool, error) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind != kind || ev.InvolvedObject.Name != job || ev.Reason != "CheckpointSaved" {
				continue
			}
			seen[ev.Message] = true
			if strings.Contains(ev.Message, cause) {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		var got []string
		for m := range seen {
			got = append(got, m)
		}
		return "", fmt.Errorf("no CheckpointSaved Event on %s %s/%s naming %q (CheckpointSaved Events seen: %q): %w", kind, ns, job, cause, got, err)
	}
	return msg, nil
}

// noBadNode: a preemption says nothing about the node, so the rescheduler
// must not have recorded one for any job of the namespace.
func (e *env) noBadNode(ctx context.Context, ns string) error {
	cms, err := e.cs.CoreV1().ConfigMaps(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "trainguard.io/bad-nodes=true"})
	if err != nil {
		return err
	}
	for _, cm := range cms.Items {
		// A record may hold a job's in-place restart count; never a node.
		if strings.HasPrefix(cm.Name, "bad-nodes-"+ns+".") && cm.Data["nodes"] != "" && cm.Data["nodes"] != "{}" {
			return fmt.Errorf("the rescheduler recorded a bad node: ConfigMap %s/%s %v", releaseNS, cm.Name, cm.Data)
		}
	}
	return nil
}

// preemptionCounted: trainguard_checkpoint_total{outcome="saved",
// cause="preemption", namespace=ns} went up during the scenario.
func (e *env) preemptionCounted(ctx context.Context, ns string, before []sample) (string, error) {
	want := map[string]string{"outcome": "saved", "cause": "preemption", "namespace": ns}
	var after float64
	err := poll(ctx, 2*time.Second, 60*time.Second, func() (bool, error) {
		m, err := e.scrapeTrainguard(ctx, "trainguard_checkpoint_total")
		if err != nil {
			return false, err
		}
		after = sumMatching(m, want)
		return after > sumMatching(before, want), nil
	})
	if err != nil {
		return "", fmt.Errorf("trainguard_checkpoint_total%v did not count the preemption (%.0f before, %.0f after): %w", want, sumMatching(before, want), after, err)
	}
	return fmt.Sprintf("trainguard_checkpoint_total{outcome=saved,cause=preemption,namespace=%s} %.0f → %.0f", ns, sumMatching(before, want), after), nil
}

// localQueue points the namespace at the ClusterQueue of the preemption scenarios.
func (e *env) localQueue(ctx context.Context, ns string) error {
	lq := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"name": kueueClusterQueue, "namespace": ns},
		"spec":     map[string]any{"clusterQueue": kueueClusterQueue},
	}}
	_, err := e.dyn.Resource(localQueues).Namespace(ns).Create(ctx, lq, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create LocalQueue: %w", err)
	}
	return nil
}

// kueuePreemption: scenario kueue-preemption, for a kubeflow PyTorchJob and a
// Kubeflow Trainer TrainJob in turn.
func (e *env) kueuePreemption(t *testing.T) {
	ctx := context.Background()
	e.uncordon(ctx, t)
	t.Run("pytorchjob", func(t *testing.T) {
		ns := e.namespace(ctx, t, "e2e-kueue-pytorchjob", true)
		if err := e.localQueue(ctx, ns); err != nil {
			t.Fatal(err)
		}
		e.recordPreemption(t, "Kueue preemption (PyTorchJob)", func() (string, error) { return e.kueuePyTorchJob(ctx, t, ns) })
	})
	t.Run("trainjob", func(t *testing.T) {
		ns := e.namespace(ctx, t, "e2e-kueue-trainjob", true)
		if err := e.localQueue(ctx, ns); err != nil {
			t.Fatal(err)
		}
		e.recordPreemption(t, "Kueue preemption (TrainJob)", func() (string, error) { return e.kueueTrainJob(ctx, t, ns) })
	})
}

// recordPreemption records the row of a preemption run; failed assertions
// fail the test and are recorded with whatever figures were measured.
func (e *env) recordPreemption(t *testing.T, row string, run func() (string, error)) {
	figures, err := run()
	if err != nil {
		if figures != "" {
			e.record(row, false, "%s; FAILED: %v", figures, err)
		}
		t.Fatal(err)
	}
	e.record(row, true, "%s", figures)
}

// kueuePyTorchJob: a training-low PyTorchJob trains; a training-high one
// arrives that needs its quota; Kueue suspends the low job (the operator
// deletes its pods, each runs trainguard's preStop hook, the trainer
// acknowledges a checkpoint); the high job runs and finishes; Kueue readmits
// the low job and every rank resumes at the acknowledged step.
func (e *env) kueuePyTorchJob(ctx context.Context, t *testing.T, ns string) (string, error) {
	low, high := "low", "high"
	if err := e.createJob(ctx, queuedPyTorchJob(ns, low, kueueLow, lowSteps, drainDelay, "100m")); err != nil {
		return "", fmt.Errorf("create the low-priority PyTorchJob: %w", err)
	}
	if err := e.waitStep(ctx, ns, low+"-master-0", 15, 5*time.Minute); err != nil {
		return "", err
	}
	pods, err := e.jobPods(ctx, ns, low)
	if err != nil {
		return "", err
	}
	vs := victimsOf(pods)
	before, err := e.scrapeTrainguard(ctx, "trainguard_checkpoint_total")
	if err != nil {
		return "", err
	}
	f := &preemptionFigures{kind: "PyTorchJob", ns: ns, job: low, ranks: 2,
		jobDir: filepath.Join(e.pvDir(ns), ns, "pytorchjob.kubeflow.org", low), victims: vs, before: before}
	t.Logf("high-priority job arrives at low's master step %d", lastStep(e.logs(ctx, ns, low+"-master-0")))
	f.arrived = time.Now()
	if err := e.createJob(ctx, queuedPyTorchJob(ns, high, kueueHigh, highSteps, 0.1, "100m")); err != nil {
		return "", fmt.Errorf("create the high-priority PyTorchJob: %w", err)
	}
	highUp := func() (bool, error) { return e.podsUp(ctx, ns, "training.kubeflow.org/job-name="+high, 2) }
	if f.highRunning, err = e.trackPreemption(ctx, ns, vs, true, highUp, 4*time.Minute); err != nil {
		return "", fmt.Errorf("low-priority job suspended %v: %w", e.suspended(ctx, pytorchJobs, ns, low, "runPolicy"), err)
	}
	if err := e.waitJob(ctx, ns, high, "Succeeded", 5*time.Minute); err != nil {
		return "", err
	}
	if f.readmitted, err = e.readmittedAt(ctx, ns, "PyTorchJob", low, f.arrived, 3*time.Minute); err != nil {
		return "", err
	}
	if f.trainingAgain, err = e.stepAfter(ctx, ns, low+"-master-0", "pytorch", f.readmitted, 5*time.Minute); err != nil {
		return "", err
	}
	if err := e.waitJob(ctx, ns, low, "Succeeded", 5*time.Minute); err != nil {
		return "", err
	}
	return f.check(ctx, e, "preempted by Kueue")
}

// kueueTrainJob is kueuePyTorchJob for TrainJobs (torchrun, 2 ranks in one pod).
func (e *env) kueueTrainJob(ctx context.Context, t *testing.T, ns string) (string, error) {
	low, high := "tj-low", "tj-high"
	if _, err := e.dyn.Resource(trainingRuntimes).Namespace(ns).Create(ctx, resilientRuntime(ns, "torch-resilient"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create TrainingRuntime: %w", err)
	}
	create := func(name, prio string, steps int, delay float64) error {
		tj := trainJob(ns, name, "torch-resilient", trainScriptWith(torchrun, name, steps, delay, 0))
		tj.SetLabels(map[string]string{queueLabel: kueueClusterQueue, priorityLabel: prio})
		_ = unstructured.SetNestedField(tj.Object, "200m", "spec", "trainer", "resourcesPerNode", "requests", "cpu")
		_, err := e.dyn.Resource(trainJobs).Namespace(ns).Create(ctx, tj, metav1.CreateOptions{})
		return err
	}
	if err := create(low, kueueLow, lowSteps, drainDelay); err != nil {
		return "", fmt.Errorf("create the low-priority TrainJob: %w", err)
	}
	var old *corev1.Pod
	err := poll(ctx, 2*time.Second, 5*time.Minute, func() (bool, error) {
		p, err := e.trainJobPod(ctx, ns, low)
		if err != nil || p == nil || !running(p) {
			return false, err
		}
		old = p
		return lastStep(e.containerLogs(ctx, ns, p.Name, "node")) >= 15, nil
	})
	if err != nil {
		return "", fmt.Errorf("TrainJob %s never reached step 15: %w (pod %s; suspended %v)", low, err, phase(old), e.suspended(ctx, trainJobs, ns, low))
	}
	vs := victimsOf([]corev1.Pod{*old})
	before, err := e.scrapeTrainguard(ctx, "trainguard_checkpoint_total")
	if err != nil {
		return "", err
	}
	f := &preemptionFigures{kind: "TrainJob", ns: ns, job: low, ranks: trainJobProcs,
		jobDir: filepath.Join(e.pvDir(ns), ns, "trainjob", low), victims: vs, before: before}
	t.Logf("high-priority TrainJob arrives at low's rank 0 step %d", lastStep(e.containerLogs(ctx, ns, old.Name, "node")))
	f.arrived = time.Now()
	if err := create(high, kueueHigh, highSteps, 0.1); err != nil {
		return "", fmt.Errorf("create the high-priority TrainJob: %w", err)
	}
	highUp := func() (bool, error) { return e.podsUp(ctx, ns, "jobset.sigs.k8s.io/jobset-name="+high, 1) }
	if f.highRunning, err = e.trackPreemption(ctx, ns, vs, true, highUp, 4*time.Minute); err != nil {
		return "", fmt.Errorf("low-priority TrainJob suspended %v: %w", e.suspended(ctx, trainJobs, ns, low), err)
	}
	if err := e.waitTrainJob(ctx, ns, high, "Complete", 5*time.Minute); err != nil {
		return "", err
	}
	if f.readmitted, err = e.readmittedAt(ctx, ns, "TrainJob", low, f.arrived, 3*time.Minute); err != nil {
		return "", err
	}
	err = poll(ctx, time.Second, 5*time.Minute, func() (bool, error) {
		p, err := e.trainJobPod(ctx, ns, low)
		if err != nil || p == nil || p.UID == old.UID {
			return false, err
		}
		ts, _, ok := firstStepAfter(e.containerLogs(ctx, ns, p.Name, "node"), f.readmitted)
		f.trainingAgain = ts
		return ok, nil
	})
	if err != nil {
		return "", fmt.Errorf("TrainJob %s: no training after readmission: %w", low, err)
	}
	if err := e.waitTrainJob(ctx, ns, low, "Complete", 5*time.Minute); err != nil {
		return "", err
	}
	return f.check(ctx, e, "preempted by Kueue")
}

// jobPods lists the live pods of a PyTorchJob.
func (e *env) jobPods(ctx context.Context, ns, job string) ([]corev1.Pod, error) {
	list, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "training.kubeflow.org/job-name=" + job})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if running(&p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no running pod of %s/%s", ns, job)
	}
	return out, nil
}

// podsUp says whether n pods match the selector and each runs or has
// succeeded (a short job may be done before it is looked at).
func (e *env) podsUp(ctx context.Context, ns, selector string, n int) (bool, error) {
	list, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return false, err
	}
	up := 0
	for i := range list.Items {
		if p := &list.Items[i]; running(p) || p.Status.Phase == corev1.PodSucceeded {
			up++
		}
	}
	return up >= n, nil
}

// trackPreemption follows the victims (observeVictims) and the preempting
// job (highUp) together, so neither's timing is lost while waiting for the
// other. It returns when the preempting job was first seen up; it ends once
// that happened and, with allGone, every victim is gone.
func (e *env) trackPreemption(ctx context.Context, ns string, vs []*victim, allGone bool, highUp func() (bool, error), timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := poll(ctx, 250*time.Millisecond, timeout, func() (bool, error) {
		if err := e.observeVictims(ctx, ns, vs); err != nil {
			return false, err
		}
		if at.IsZero() {
			up, err := highUp()
			if err != nil {
				return false, err
			}
			if up {
				at = time.Now()
			}
		}
		done := !at.IsZero()
		for _, v := range vs {
			done = done && (!allGone || !v.gone.IsZero())
		}
		return done, nil
	})
	if err != nil {
		var st []string
		for _, v := range vs {
			st = append(st, fmt.Sprintf("%s gone=%v", v.name, !v.gone.IsZero()))
		}
		return at, fmt.Errorf("preemption incomplete (preempting job up: %v; %s): %w", !at.IsZero(), strings.Join(st, ", "), err)
	}
	return at, nil
}

// suspendPath is where a job kind keeps its suspend flag.
func suspendPath(under string) []string {
	if under == "" {
		return []string{"spec", "suspend"}
	}
	return []string{"spec", under, "suspend"}
}

func (e *env) suspended(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, under ...string) bool {
	u := ""
	if len(under) > 0 {
		u = under[0]
	}
	obj, err := e.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	s, _, _ := unstructured.NestedBool(obj.Object, suspendPath(u)...)
	return s
}

// readmittedAt waits until Kueue admits the job's Workload again after t
// and returns when it did (the Admitted condition's transition, to the second).
func (e *env) readmittedAt(ctx context.Context, ns, kind, job string, t time.Time, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := poll(ctx, time.Second, timeout, func() (bool, error) {
		list, err := e.dyn.Resource(workloads).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, wl := range list.Items {
			for _, o := range wl.GetOwnerReferences() {
				if o.Kind != kind || o.Name != job {
					continue
				}
				conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
				for _, c := range conds {
					m, _ := c.(map[string]any)
					if m["type"] != "Admitted" || m["status"] != "True" {
						continue
					}
					at, err = time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
					return err == nil && !at.Before(t.Truncate(time.Second)), nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return at, fmt.Errorf("%s %s/%s not readmitted by Kueue: %w", kind, ns, job, err)
	}
	return at, nil
}

// stepAfter waits for the pod's first completed step logged after t.
func (e *env) stepAfter(ctx context.Context, ns, pod, container string, t time.Time, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := poll(ctx, time.Second, timeout, func() (bool, error) {
		ts, _, ok := firstStepAfter(e.containerLogs(ctx, ns, pod, container), t)
		at = ts
		return ok, nil
	})
	if err != nil {
		p, _ := e.pod(ctx, ns, pod)
		return at, fmt.Errorf("%s/%s: no training after %s: %w (pod %s)", ns, pod, t.Format(time.RFC3339), err, phase(p))
	}
	return at, nil
}

// Priority classes of the scheduler-preemption scenario.
const (
	schedLow  = "e2e-training-low"
	schedHigh = "e2e-training-high"
)

func (e *env) priorityClasses(ctx context.Context) error {
	for name, v := range map[string]int32{schedLow: 100, schedHigh: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v,
			Description: "trainguard e2e: scheduler-preemption scenario"}
		if _, err := e.cs.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create PriorityClass %s: %w", name, err)
		}
	}
	return nil
}
