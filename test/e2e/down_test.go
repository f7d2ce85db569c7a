//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// trainguardDown: with trainguard scaled to 0, namespaces that did not opt in
// create pods as usual; in an opted-in namespace a PyTorchJob and its pods
// are refused with a message naming trainguard, while updates (resuming a
// PyTorchJob, labelling a TrainJob and its TrainingRuntime) go through;
// scaled back up, the job proceeds without anyone touching it.
func (e *env) trainguardDown(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-down", true)
	plain := e.namespace(ctx, t, "e2e-plain", false)
	sleeper := replica{1, "OnFailure", sleepScript}
	// Created while trainguard is up, suspended: its pods come later.
	if err := e.createJob(ctx, pytorchJob(ns, "waiting", sleeper, replica{}, true)); err != nil {
		t.Fatalf("create suspended job: %v", err)
	}
	if err := e.createSuspendedTrainJob(ctx, ns, "waiting-tj"); err != nil {
		t.Fatalf("create suspended TrainJob: %v", err)
	}
	e.scale(ctx, t, 0)
	tDown := time.Now()
	scaledUp := false
	defer func() {
		if !scaledUp {
			e.scale(ctx, t, 2)
		}
	}()
	if _, err := e.cs.CoreV1().Pods(plain).Create(ctx, pendingPod(plain, "unaffected"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod in a namespace that did not opt in was refused while trainguard is down: %v", err)
	}
	err := e.createJob(ctx, pytorchJob(ns, "refused", sleeper, replica{}, false))
	if err == nil || !strings.Contains(err.Error(), "trainguard") {
		t.Fatalf("PyTorchJob in an opted-in namespace while trainguard is down: want a refusal naming trainguard, got %v", err)
	}
	jobRefusal := err.Error()
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pendingPod(ns, "refused"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "trainguard") {
		t.Fatalf("pod in an opted-in namespace while trainguard is down: want a refusal naming trainguard, got %v", err)
	}
	// Invariant 4 of the design: updates are never blocked by trainguard down.
	patch := []byte(`{"spec":{"runPolicy":{"suspend":false}}}`)
	podRefusal, resumedWhileDown := "", true
	if _, err := e.dyn.Resource(pytorchJobs).Namespace(ns).Patch(ctx, "waiting", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("updating a PyTorchJob (resume it) was refused while trainguard is down; only creations may be: %v", err)
		resumedWhileDown = false
	} else {
		podRefusal, err = e.eventContaining(ctx, ns, 90*time.Second, "trainguard", "failed calling webhook")
		if err != nil {
			t.Fatalf("the operator's pod creation was not refused with a message naming trainguard: %v", err)
		}
		if p, _ := e.pod(ctx, ns, "waiting-master-0"); p != nil {
			t.Fatalf("pod %s was created while trainguard is down (not injected: %q)", p.Name, p.Annotations["trainguard.io/injected"])
		}
	}
	// The same for Trainer's kinds: their UPDATE entries
	// fail open, so a label edit, Kueue's suspend toggle or a finalizer
	// removal never waits for trainguard.
	edited := []byte(`{"metadata":{"labels":{"e2e.trainguard.io/edited":"while-down"}}}`)
	if _, err := e.dyn.Resource(trainJobs).Namespace(ns).Patch(ctx, "waiting-tj", types.MergePatchType, edited, metav1.PatchOptions{}); err != nil {
		t.Errorf("labelling a TrainJob was refused while trainguard is down; only creations may be: %v", err)
	}
	if _, err := e.dyn.Resource(trainingRuntimes).Namespace(ns).Patch(ctx, "torch-resilient", types.MergePatchType, edited, metav1.PatchOptions{}); err != nil {
		t.Errorf("labelling a TrainingRuntime was refused while trainguard is down; only creations may be: %v", err)
	}
	down := time.Since(tDown)
	e.scale(ctx, t, 2)
	scaledUp = true
	tUp := time.Now()
	if !resumedWhileDown {
		if _, err := e.dyn.Resource(pytorchJobs).Namespace(ns).Patch(ctx, "waiting", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("resume the job after trainguard came back: %v", err)
		}
	}
	p, err := e.waitPod(ctx, ns, "waiting-master-0", 5*time.Minute, running)
	if err != nil {
		t.Fatalf("job did not proceed after trainguard came back: %v", err)
	}
	if p.Annotations["trainguard.io/injected"] == "" {
		t.Fatalf("pod created after trainguard came back is not injected")
	}
	if t.Failed() {
		return
	}
	e.record("trainguard down", true, "down %s: other namespace unaffected; job refused (%q); pods refused (%q); TrainJob and runtime labelled; job's pod running %s after scale-up, no manual action",
		down.Round(time.Second), clip(jobRefusal), clip(podRefusal), time.Since(tUp).Round(time.Second))
}

// createSuspendedTrainJob creates the namespace's resilient runtime and a
// suspended TrainJob on it (no pods), as Kueue holds one in its queue.
func (e *env) createSuspendedTrainJob(ctx context.Context, ns, name string) error {
	rt := resilientRuntime(ns, "torch-resilient")
	if _, err := e.dyn.Resource(trainingRuntimes).Namespace(ns).Create(ctx, rt, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("create TrainingRuntime: %w", err)
	}
	tj := trainJob(ns, name, "torch-resilient", sleepScript)
	if err := unstructured.SetNestedField(tj.Object, true, "spec", "suspend"); err != nil {
		return err
	}
	if _, err := e.dyn.Resource(trainJobs).Namespace(ns).Create(ctx, tj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create TrainJob: %w", err)
	}
	return nil
}

func (e *env) scale(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	if _, err := e.kubectl(ctx, "-n", releaseNS, "scale", "deployment/"+releaseName, fmt.Sprintf("--replicas=%d", n)); err != nil {
		t.Fatalf("scale trainguard to %d: %v", n, err)
	}
	err := poll(ctx, time.Second, 3*time.Minute, func() (bool, error) {
		pods, err := e.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=trainguard"})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		if n == 0 {
			return len(pods.Items) == 0, nil
		}
		return ready == n, nil
	})
	if err != nil {
		t.Fatalf("trainguard did not reach %d replicas: %v", n, err)
	}
	if n > 0 {
		if err := e.waitAdmission(ctx, 2*time.Minute); err != nil {
			t.Fatalf("admission not back after scaling to %d: %v", n, err)
		}
	}
}

// eventContaining waits for an Event in ns whose message contains every s.
func (e *env) eventContaining(ctx context.Context, ns string, timeout time.Duration, s ...string) (string, error) {
	var msg string
	err := poll(ctx, 2*time.Second, timeout, func() (bool, error) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			all := true
			for _, sub := range s {
				all = all && strings.Contains(ev.Message, sub)
			}
			if all {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg, err
}

func clip(s string) string {
	if len(s) > 110 {
		return s[:110] + "…"
	}
	return s
}
