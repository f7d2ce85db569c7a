//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// plainCap bounds the wait for plain Kubernetes to recover (it may never).
// E2E_PLAIN_CAP=auto (what .ci/run sets) waits only as long as it takes to
// show trainguard recovers at least minRatio times faster.
var plainCap = durationEnv("E2E_PLAIN_CAP", 10*time.Minute)

const minRatio = 4

// plainLimit is the wait for plain Kubernetes, given trainguard's recovery time.
func plainLimit(with time.Duration) time.Duration {
	if os.Getenv("E2E_PLAIN_CAP") == "auto" {
		return minRatio*with + 30*time.Second
	}
	return plainCap
}

func durationEnv(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// nodeCrash: a node dies (kubelet, containerd, shims and containers killed).
// With trainguard the rescheduler moves the lost pod after its grace, the
// replacement avoids the dead node and training resumes from the last
// periodic checkpoint. Then the same job on the same cluster without
// trainguard: in a namespace that did not opt in, so the webhook injects
// nothing and the rescheduler leaves its pods alone (policy.Scope, the same
// decision for both): plain Kubernetes and the operator, capped. trainguard
// stays installed for the scenarios running beside this one.
func (e *env) nodeCrash(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-crash", true)
	with, err := e.crashOnce(ctx, t, ns, "crash-tg", plainCap)
	if err != nil {
		t.Fatalf("with trainguard: %v", err)
	}
	resumedAt := e.resumedStepNote
	plain := e.namespace(ctx, t, "e2e-crash-plain", false)
	limit := plainLimit(with)
	without, err := e.crashOnce(ctx, t, plain, "crash-plain", limit)
	if err != nil && !strings.HasPrefix(err.Error(), "no recovery") {
		t.Fatalf("without trainguard: %v", err)
	}
	w := without.String()
	if err != nil {
		w = fmt.Sprintf("> %s (%v)", limit.Round(time.Second), err)
	} else if without < minRatio*with {
		t.Errorf("plain Kubernetes recovered in %s, less than %dx trainguard's %s", without.Round(time.Second), minRatio, with.Round(time.Second))
	}
	e.record("node crash", true, "time to recover with trainguard %s (shipped defaults; %s); without trainguard %s",
		with.Round(time.Second), resumedAt, clip(w))
}

// crashOnce runs a periodic-checkpointing job, kills the node of its first
// worker and returns the time from the kill until rank 0 completes a step
// again, in a container started after the kill.
func (e *env) crashOnce(ctx context.Context, t *testing.T, ns, job string, limit time.Duration) (time.Duration, error) {
	const saveEvery = 10
	script := trainScript(job, 2000, 0.3, saveEvery)
	if err := e.createJob(ctx, pytorchJob(ns, job, replica{1, "OnFailure", script}, replica{2, "OnFailure", script}, false)); err != nil {
		return 0, fmt.Errorf("create PyTorchJob: %w", err)
	}
	defer func() {
		_ = e.dyn.Resource(pytorchJobs).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{})
	}()
	master := job + "-master-0"
	if err := e.waitStep(ctx, ns, master, 25, 5*time.Minute); err != nil {
		return 0, err
	}
	w, err := e.pod(ctx, ns, job+"-worker-0")
	if err != nil || w == nil {
		return 0, fmt.Errorf("worker pod: %v", err)
	}
	node := w.Spec.NodeName
	idx := strings.TrimPrefix(node, "tg-node-")
	killStep := lastStep(e.logs(ctx, ns, master))
	t.Logf("%s: killing node %s at master step %d", job, node, killStep)
	tKill := time.Now()
	defer e.restartNode(ctx, t, idx)
	if _, err := e.run(ctx, "bash", "hack/cluster/node-ctl.sh", "kill", idx); err != nil {
		return 0, err
	}
	var recovered time.Time
	var why string
	err = poll(ctx, 2*time.Second, limit, func() (bool, error) {
		p, err := e.pod(ctx, ns, master)
		if err != nil || p == nil {
			why = "master pod absent"
			return false, err
		}
		why = e.blocker(ctx, ns, job, node)
		if !startedAfter(p, tKill, "pytorch") {
			return false, nil
		}
		ts, step, ok := firstStepAfter(e.logs(ctx, ns, master), tKill)
		if ok {
			recovered = ts
			e.resumedStepNote = e.stepsLost(ctx, ns, master, killStep, step-1, saveEvery)
		}
		return ok, nil
	})
	if err != nil {
		return 0, fmt.Errorf("no recovery within %s: %s", limit, why)
	}
	if p, _ := e.pod(ctx, ns, job+"-worker-0"); p != nil && p.Spec.NodeName == node {
		return 0, fmt.Errorf("replacement worker runs on the dead node %s", node)
	}
	return recovered.Sub(tKill), nil
}

// stepsLost says where training resumed and how many steps the crash cost:
// the last step the master's previous incarnation completed (when its
// container restarted in place, from its previous log; the log read at the
// kill lags behind) minus the step of the periodic checkpoint it resumed
// from. When the master died with the node (its pod was replaced), its last
// step is not readable: the bound is the checkpoint interval.
func (e *env) stepsLost(ctx context.Context, ns, master string, killStep, resumed, every int) string {
	raw, err := e.cs.CoreV1().Pods(ns).GetLogs(master, &corev1.PodLogOptions{Container: "pytorch", Previous: true, Timestamps: true}).DoRaw(ctx)
	if last := lastStep(string(raw)); err == nil && last > 0 {
		return fmt.Sprintf("last step before the crash %d, resumed at the periodic checkpoint of step %d: %d steps lost", last, resumed, max(last-resumed, 0))
	}
	return fmt.Sprintf("resumed at the periodic checkpoint of step %d (the log read at the kill showed step %d; the master died with the node, so at most %d steps lost, one checkpoint interval)",
		resumed, killStep, every)
}

// startedAfter: the pod's training container (re)started after t.
func startedAfter(p *corev1.Pod, t time.Time, container string) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container && s.State.Running != nil && s.State.Running.StartedAt.After(t) {
			return true
		}
	}
	return false
}

// blocker describes what holds the job back (for the "> cap" report).
func (e *env) blocker(ctx context.Context, ns, job, deadNode string) string {
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "training.kubeflow.org/job-name=" + job})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == deadNode {
			if p.DeletionTimestamp != nil {
				return fmt.Sprintf("pod %s stays Terminating on the dead node, so the operator cannot recreate it", p.Name)
			}
			return fmt.Sprintf("pod %s still bound to the dead node (%s)", p.Name, p.Status.Phase)
		}
	}
	return "pods not yet running again"
}

// restartNode brings a killed node back and waits until it is Ready.
func (e *env) restartNode(ctx context.Context, t *testing.T, idx string) {
	if _, err := e.run(ctx, "bash", "hack/cluster/node-ctl.sh", "start", idx); err != nil {
		t.Errorf("restart node %s: %v", idx, err)
		return
	}
	e.waitNodeReady(ctx, t, idx)
}

// waitNodeReady waits until node idx reports Ready again and the node
// lifecycle controller has lifted its not-ready and unreachable taints, so
// the lane's next scenario starts on a node that is wholly back.
func (e *env) waitNodeReady(ctx context.Context, t *testing.T, idx string) {
	err := poll(ctx, 2*time.Second, 2*time.Minute, func() (bool, error) {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, "tg-node-"+idx, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable {
				return false, nil
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("node %s not Ready after restart: %v", idx, err)
	}
}
