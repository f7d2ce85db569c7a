//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	trainJobs        = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
	trainingRuntimes = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainingruntimes"}
	jobSets          = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
	batchJobs        = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

const (
	// trainJobProcs: torchrun starts this many ranks in the one trainer pod,
	// so a drain stops every rank of the job at once and all must resume.
	trainJobProcs  = 2
	trainJobMaxRst = 3
)

// resilientRuntime is Trainer's torch-distributed runtime as docs/trainjob.md
// recommends it: a pod evicted from a drained or failed node (condition
// DisruptionTarget) does not count against the Job's backoffLimit (a pod
// failure policy needs restartPolicy Never), and the JobSet may restart.
func resilientRuntime(ns, name string) *unstructured.Unstructured {
	container := map[string]any{"name": "node", "image": trainerImage, "imagePullPolicy": "Never"}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"trainer.kubeflow.org/framework": "torch"}},
		"spec": map[string]any{
			"mlPolicy": map[string]any{"numNodes": int64(1), "torch": map[string]any{}},
			"template": map[string]any{"spec": map[string]any{
				"failurePolicy": map[string]any{"maxRestarts": int64(trainJobMaxRst)},
				"replicatedJobs": []any{map[string]any{
					"name": "node",
					"template": map[string]any{
						"metadata": map[string]any{"labels": map[string]any{"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
						"spec": map[string]any{
							"backoffLimit": int64(0),
							"podFailurePolicy": map[string]any{"rules": []any{map[string]any{
								"action":          "Ignore",
								"onPodConditions": []any{map[string]any{"type": "DisruptionTarget", "status": "True"}},
							}}},
							"template": map[string]any{"spec": map[string]any{
								"restartPolicy":                 "Never",
								"terminationGracePeriodSeconds": int64(30),
								"containers":                    []any{container},
							}},
						},
					},
				}},
			}},
		},
	}}
}

// trainJob is a TrainJob as a user writes it: the runtime, the image, the
// command and the size; nothing of trainguard's.
func trainJob(ns, name, runtime, script string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"runtimeRef": map[string]any{"name": runtime, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
			"trainer": map[string]any{
				"image": trainerImage, "command": []any{"/bin/sh", "-c", script},
				"numNodes": int64(1), "numProcPerNode": int64(trainJobProcs),
				"resourcesPerNode": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "300Mi"}},
			},
		},
	}}
}

// torchrun is the launcher inside a TrainJob's pod: it reads the PET_* env
// Trainer's torch plugin sets (nodes, processes per node, rank, master).
// --redirects/--tee are explicit because torch 1.13's default ("0") crashes
// torchrun on Python 3.11 (IntFlag iteration skips the zero member); the
// workers' stdout is tee'd to the container log, each line prefixed "[defaultN]:"
// (their stderr goes to the log directory only: any other setting crashes it too).
const torchrun = "python3 -m torch.distributed.run --redirects=2 --tee=1 --log_dir=/tmp/torchrun"

// startTrainJob creates the namespace's resilient runtime and a TrainJob,
// and returns its trainer pod once rank 0 completed step n.
func (e *env) startTrainJob(ctx context.Context, t *testing.T, ns, name string, steps, saveEvery, n int) *corev1.Pod {
	t.Helper()
	return e.startAnnotatedTrainJob(ctx, t, ns, name, nil, steps, saveEvery, n)
}

// startAnnotatedTrainJob is startTrainJob with the TrainJob's annotations.
func (e *env) startAnnotatedTrainJob(ctx context.Context, t *testing.T, ns, name string, annotations map[string]string, steps, saveEvery, n int) *corev1.Pod {
	t.Helper()
	rt := resilientRuntime(ns, "torch-resilient")
	if _, err := e.dyn.Resource(trainingRuntimes).Namespace(ns).Create(ctx, rt, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("create TrainingRuntime: %v", err)
	}
	script := trainScriptWith(torchrun, name, steps, drainDelay, saveEvery)
	tj := trainJob(ns, name, "torch-resilient", script)
	tj.SetAnnotations(annotations)
	if _, err := e.dyn.Resource(trainJobs).Namespace(ns).Create(ctx, tj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create TrainJob: %v", err)
	}
	var pod *corev1.Pod
	err := poll(ctx, 2*time.Second, 5*time.Minute, func() (bool, error) {
		p, err := e.trainJobPod(ctx, ns, name)
		if err != nil || p == nil || !running(p) {
			return false, err
		}
		pod = p
		return lastStep(e.containerLogs(ctx, ns, p.Name, "node")) >= n, nil
	})
	if err != nil {
		t.Fatalf("TrainJob %s/%s: rank 0 never reached step %d: %v (pod %s)", ns, name, n, err, phase(pod))
	}
	return pod
}

// trainJobPod returns the newest live pod of the TrainJob's trainer (nil if none).
func (e *env) trainJobPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return e.newestLivePod(ctx, ns, "jobset.sigs.k8s.io/jobset-name="+name)
}

// trainJobDrain: `kubectl drain` the node of a TrainJob's trainer pod. The
// kubelet runs trainguard's preStop hook, rank 0 saves and acknowledges, the
// Job creates the index again on another node, and every rank resumes at the
// acknowledged step. The eviction must not count: the Job has no failed pod
// and the JobSet was not restarted.
func (e *env) trainJobDrain(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-trainjob-drain", true)
	name := "tj-drain"
	e.uncordon(ctx, t)
	old := e.startTrainJob(ctx, t, ns, name, drainSteps, 0, 15)
	if inj := old.Annotations["trainguard.io/injected"]; !strings.Contains(inj, "prestop") {
		t.Fatalf("trainer pod not injected with the preStop hook: trainguard.io/injected=%q", inj)
	}
	node := old.Spec.NodeName
	t.Logf("draining %s (runs %s) at rank 0 step %d", node, old.Name, lastStep(e.containerLogs(ctx, ns, old.Name, "node")))
	tDrain := time.Now()
	if _, err := e.kubectl(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s"); err != nil {
		t.Fatalf("drain: %v", err)
	}
	drained := time.Since(tDrain)
	repl, err := e.replacementPod(ctx, ns, name, old, 5*time.Minute)
	_, _ = e.kubectl(ctx, "uncordon", node)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.waitTrainJob(ctx, ns, name, "Complete", 8*time.Minute); err != nil {
		t.Fatal(err)
	}
	figures, err := e.drainFigures(filepath.Join(e.pvDir(ns), ns, "trainjob", name), name, tDrain, trainJobProcs)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := e.disruptionsNotCounted(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := e.checkpointSavedEvent(ctx, ns, "TrainJob", name)
	if err != nil {
		t.Fatal(err)
	}
	e.record("TrainJob drain", true, "trainer pod moved %s → %s; drain took %s; %s; %s; outcome Event on the TrainJob: %s",
		node, repl.Spec.NodeName, drained.Round(time.Second), figures, counts, saved)
}

// replacementPod waits for a running trainer pod of the TrainJob other than
// old, on another node.
func (e *env) replacementPod(ctx context.Context, ns, name string, old *corev1.Pod, timeout time.Duration) (*corev1.Pod, error) {
	var repl *corev1.Pod
	err := poll(ctx, time.Second, timeout, func() (bool, error) {
		p, err := e.trainJobPod(ctx, ns, name)
		if err != nil || p == nil {
			return false, err
		}
		repl = p
		return p.UID != old.UID && running(p), nil
	})
	if err != nil {
		return nil, fmt.Errorf("replacement of %s: %w (last %s)", old.Name, err, phase(repl))
	}
	if repl.Spec.NodeName == old.Spec.NodeName {
		return nil, fmt.Errorf("replacement %s runs on %s, the node its predecessor was stopped on", repl.Name, repl.Spec.NodeName)
	}
	return repl, nil
}

// waitTrainJob waits for the TrainJob's condition want to be True; Failed ends the wait.
func (e *env) waitTrainJob(ctx context.Context, ns, name, want string, timeout time.Duration) error {
	var conds []string
	err := poll(ctx, 2*time.Second, timeout, func() (bool, error) {
		tj, err := e.dyn.Resource(trainJobs).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds = trueConditions(tj)
		for _, c := range conds {
			if c == want {
				return true, nil
			}
			if c == "Failed" {
				return false, stop(fmt.Errorf("TrainJob failed"))
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("TrainJob %s/%s not %s: %w (true conditions %v)", ns, name, want, err, conds)
	}
	return nil
}

func trueConditions(obj *unstructured.Unstructured) []string {
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var out []string
	for _, c := range list {
		if m, _ := c.(map[string]any); m["status"] == "True" {
			out = append(out, fmt.Sprint(m["type"]))
		}
	}
	return out
}

// disruptionsNotCounted asserts from the objects' status that stopping the
// trainer pod used up neither the Job's backoffLimit (no failed pod counted)
// nor the JobSet's maxRestarts (no restart).
func (e *env) disruptionsNotCounted(ctx context.Context, ns, name string) (string, error) {
	js, err := e.dyn.Resource(jobSets).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("JobSet of TrainJob %s: %w", name, err)
	}
	restarts, _, _ := unstructured.NestedInt64(js.Object, "status", "restarts")
	toward, _, _ := unstructured.NestedInt64(js.Object, "status", "restartsCountTowardsMax")
	jobs, err := e.dyn.Resource(batchJobs).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=" + name})
	if err != nil || len(jobs.Items) == 0 {
		return "", fmt.Errorf("Jobs of JobSet %s: %v (%d found)", name, err, len(jobs.Items))
	}
	failed := int64(0)
	for _, j := range jobs.Items {
		f, _, _ := unstructured.NestedInt64(j.Object, "status", "failed")
		failed += f
	}
	if restarts != 0 || toward != 0 || failed != 0 {
		return "", fmt.Errorf("the disruption was counted: JobSet restarts %d (towards maxRestarts %d of %d), Job failed pods %d (backoffLimit 0)",
			restarts, toward, trainJobMaxRst, failed)
	}
	return fmt.Sprintf("JobSet restarts 0 of maxRestarts %d, Job failed pods 0 of backoffLimit 0", trainJobMaxRst), nil
}

// trainJobCrash: the node of a TrainJob's trainer pod dies. trainguard's
// rescheduler moves the lost pod after its grace, the Job creates the index
// again, the replacement avoids the dead node, and training advances again
// from the last periodic checkpoint, without using up the JobSet's restarts.
func (e *env) trainJobCrash(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-trainjob-crash", true)
	name := "tj-crash"
	old := e.startTrainJob(ctx, t, ns, name, 2000, 10, 25)
	node := old.Spec.NodeName
	idx := strings.TrimPrefix(node, "tg-node-")
	t.Logf("%s: killing node %s at rank 0 step %d", name, node, lastStep(e.containerLogs(ctx, ns, old.Name, "node")))
	tKill := time.Now()
	defer e.restartNode(ctx, t, idx)
	if _, err := e.run(ctx, "bash", "hack/cluster/node-ctl.sh", "kill", idx); err != nil {
		t.Fatal(err)
	}
	var step int
	var recovered time.Time
	err := poll(ctx, 2*time.Second, 6*time.Minute, func() (bool, error) {
		p, err := e.trainJobPod(ctx, ns, name)
		if err != nil || p == nil || p.UID == old.UID || !startedAfter(p, tKill, "node") {
			return false, err
		}
		ts, n, ok := firstStepAfter(e.containerLogs(ctx, ns, p.Name, "node"), tKill)
		recovered, step = ts, n
		return ok, nil
	})
	if err != nil {
		t.Fatalf("TrainJob %s: no training after the node died: %v", name, err)
	}
	repl, _ := e.trainJobPod(ctx, ns, name)
	if repl == nil || repl.Spec.NodeName == node {
		t.Fatalf("replacement trainer pod runs on the dead node %s", node)
	}
	counts, err := e.disruptionsNotCounted(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	_ = e.dyn.Resource(trainJobs).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
	e.record("TrainJob node crash", true, "trainer pod moved %s → %s; node death → training advancing again %s (resumed at checkpointed step %d); %s",
		node, repl.Spec.NodeName, recovered.Sub(tKill).Round(time.Second), step-1, counts)
}
