//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const boostAnnotation = "kueue.x-k8s.io/priority-boost"

// boostJob is a one-rank training-low (or -high) PyTorchJob of the
// checkpoint-aware-preemption scenario, asking 100m (the ClusterQueue
// holds 300m: two low jobs fit, a high one of 200m needs one's quota).
// args are appended to the trainer's command (argparse: the last wins).
func boostJob(ns, name, priority, cpu string, steps int, args ...any) *unstructured.Unstructured {
	job := pytorchJob(ns, name, replica{count: 1, restartPolicy: "OnFailure"}, replica{}, false)
	job.SetLabels(map[string]string{queueLabel: kueueClusterQueue, priorityLabel: priority})
	withPID1Trainer(job, steps, 0.5, cpu)
	c := []string{"spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers"}
	containers, _, _ := unstructured.NestedSlice(job.Object, c...)
	ctr := containers[0].(map[string]any)
	if len(args) == 1 && args[0] == "sleep" { // a pod Kueue admits, nothing trainguard would know
		ctr["command"] = []any{"/bin/sh", "-c", "sleep 3600"}
	} else {
		ctr["command"] = append(ctr["command"].([]any), args...)
	}
	_ = unstructured.SetNestedSlice(job.Object, containers, c...)
	return job
}

// workloadOf returns the Kueue Workload of a PyTorchJob.
func (e *env) workloadOf(ctx context.Context, ns, job string) (*unstructured.Unstructured, error) {
	list, err := e.dyn.Resource(workloads).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		for _, o := range list.Items[i].GetOwnerReferences() {
			if o.Kind == "PyTorchJob" && o.Name == job {
				return &list.Items[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no Workload of PyTorchJob %s/%s", ns, job)
}

// preempted waits until Kueue suspends one of the jobs and names it.
func (e *env) preempted(ctx context.Context, ns string, jobs ...string) (string, error) {
	var victim string
	err := poll(ctx, 500*time.Millisecond, 3*time.Minute, func() (bool, error) {
		for _, j := range jobs {
			if e.suspended(ctx, pytorchJobs, ns, j, "runPolicy") {
				victim = j
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("Kueue suspended none of %v: %w", jobs, err)
	}
	return victim, nil
}

func (e *env) deleteJobs(ctx context.Context, ns string, jobs ...string) {
	bg := metav1.DeletePropagationBackground
	for _, j := range jobs {
		_ = e.dyn.Resource(pytorchJobs).Namespace(ns).Delete(ctx, j, metav1.DeleteOptions{PropagationPolicy: &bg})
	}
	_ = poll(ctx, time.Second, 2*time.Minute, func() (bool, error) {
		for _, j := range jobs {
			if _, err := e.workloadOf(ctx, ns, j); err == nil {
				return false, nil
			}
		}
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// checkpointAwarePreemption: scenario checkpoint-aware-preemption (issue
// 30). Two training-low jobs share the ClusterQueue: "fresh", whose trainer
// listens and commits a checkpoint every 5 steps, admitted first, and
// "deaf", whose trainer never listens (no termination checkpoint, no
// commit), admitted second. A training-high job arrives needing one job's
// quota. Kueue alone preempts the most recently admitted job of the lowest
// priority: deaf, which loses every step. With trainguard's boost, deaf's
// Workload carries kueue.x-k8s.io/priority-boost and Kueue preempts fresh,
// which saves an acknowledged checkpoint in its preStop hook and loses
// nothing. The second round runs the same jobs (sleeping) in a namespace
// trainguard does not inject: Kueue's own choice.
func (e *env) checkpointAwarePreemption(t *testing.T) {
	ctx := context.Background()
	e.uncordon(ctx, t)
	ns := e.namespace(ctx, t, "e2e-boost", true)
	if err := e.localQueue(ctx, ns); err != nil {
		t.Fatal(err)
	}
	e.recordPreemption(t, "checkpoint-aware preemption (Kueue PriorityBoost)", func() (string, error) {
		defer e.deleteJobs(ctx, ns, "fresh", "deaf", "high")
		return e.boostRound(ctx, t, ns)
	})
	plain := e.namespace(ctx, t, "e2e-boost-plain", false)
	if err := e.localQueue(ctx, plain); err != nil {
		t.Fatal(err)
	}
	e.recordPreemption(t, "checkpoint-aware preemption, without trainguard's boost", func() (string, error) {
		defer e.deleteJobs(ctx, plain, "fresh", "deaf", "high")
		for _, j := range []string{"fresh", "deaf"} {
			if err := e.createJob(ctx, boostJob(plain, j, kueueLow, "100m", 0, "sleep")); err != nil {
				return "", err
			}
			if err := poll(ctx, time.Second, 3*time.Minute, func() (bool, error) { return e.podsUp(ctx, plain, "training.kubeflow.org/job-name="+j, 1) }); err != nil {
				return "", fmt.Errorf("%s never ran: %w", j, err)
			}
		}
		if err := e.createJob(ctx, boostJob(plain, "high", kueueHigh, "200m", 0, "sleep")); err != nil {
			return "", err
		}
		v, err := e.preempted(ctx, plain, "fresh", "deaf")
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Kueue alone (no boost: equal priority, the most recently admitted first) preempted %q", v), nil
	})
}

func (e *env) boostRound(ctx context.Context, t *testing.T, ns string) (string, error) {
	const steps = 400 // outlasts the scenario: the jobs are deleted at its end
	if err := e.createJob(ctx, boostJob(ns, "fresh", kueueLow, "100m", steps, "--save-every", "5")); err != nil {
		return "", fmt.Errorf("create fresh: %w", err)
	}
	if err := e.waitStep(ctx, ns, "fresh-master-0", 5, 5*time.Minute); err != nil {
		return "", err
	}
	if err := e.createJob(ctx, boostJob(ns, "deaf", kueueLow, "100m", steps, "--no-listen")); err != nil {
		return "", fmt.Errorf("create deaf: %w", err)
	}
	if err := e.waitStep(ctx, ns, "deaf-master-0", 5, 5*time.Minute); err != nil {
		return "", err
	}
	// trainguard boosts deaf (its trainer answers no status past the
	// startup grace) and leaves fresh alone (its checkpoint fits its grace).
	var boost string
	err := poll(ctx, 2*time.Second, 2*time.Minute, func() (bool, error) {
		wl, err := e.workloadOf(ctx, ns, "deaf")
		if err != nil {
			return false, err
		}
		boost = wl.GetAnnotations()[boostAnnotation]
		return boost != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("trainguard never boosted deaf's Workload: %w", err)
	}
	wl, err := e.workloadOf(ctx, ns, "fresh")
	if err != nil {
		return "", err
	}
	if b := wl.GetAnnotations()[boostAnnotation]; b != "" && b != "0" {
		return "", fmt.Errorf("fresh's Workload is boosted (%s) although its checkpoint fits its grace period", b)
	}
	atRisk, _ := e.scrapeTrainguard(ctx, "trainguard_work_at_risk_steps")
	freshStep, deafStep := lastStep(e.logs(ctx, ns, "fresh-master-0")), lastStep(e.logs(ctx, ns, "deaf-master-0"))
	freshDir := filepath.Join(e.pvDir(ns), ns, "pytorchjob.kubeflow.org", "fresh")
	committed := latestStep(freshDir)
	t.Logf("high arrives: fresh at step %d (last commit %d), deaf at step %d (no commit, boost %s)", freshStep, committed, deafStep, boost)
	freshPods, err := e.jobPods(ctx, ns, "fresh")
	if err != nil {
		return "", err
	}
	vs := victimsOf(freshPods)
	arrived := time.Now()
	if err := e.createJob(ctx, boostJob(ns, "high", kueueHigh, "200m", 10)); err != nil {
		return "", fmt.Errorf("create high: %w", err)
	}
	// One loop follows the suspension, fresh's pod and high's pod, so that
	// the quota question (may high start while fresh still checkpoints?)
	// is answered with the times each was seen.
	var victim string
	var suspendedAt, highUp time.Time
	err = poll(ctx, 250*time.Millisecond, 4*time.Minute, func() (bool, error) {
		if victim == "" {
			for _, j := range []string{"fresh", "deaf"} {
				if e.suspended(ctx, pytorchJobs, ns, j, "runPolicy") {
					victim, suspendedAt = j, time.Now()
				}
			}
		}
		if err := e.observeVictims(ctx, ns, vs); err != nil {
			return false, err
		}
		if highUp.IsZero() {
			if up, _ := e.podsUp(ctx, ns, "training.kubeflow.org/job-name=high", 1); up {
				highUp = time.Now()
			}
		}
		return victim != "" && (victim != "fresh" || !vs[0].gone.IsZero()) && !highUp.IsZero(), nil
	})
	if err != nil && victim == "" {
		return "", fmt.Errorf("Kueue suspended neither job: %w", err)
	}
	figures := fmt.Sprintf("deaf's Workload boost %s, fresh's none; at the preemption fresh was at step %d (last periodic commit %d), deaf at step %d (never committed); Kueue preempted %q %.1f s after high arrived",
		boost, freshStep, committed, deafStep, victim, suspendedAt.Sub(arrived).Seconds())
	if victim == "fresh" && !vs[0].gone.IsZero() && !highUp.IsZero() {
		figures += fmt.Sprintf("; fresh's pod gone %.1f s after the suspension, high's pod running %.1f s after it (%s)",
			vs[0].gone.Sub(suspendedAt).Seconds(), highUp.Sub(suspendedAt).Seconds(),
			map[bool]string{true: "high started before fresh's pod was gone", false: "high started only after fresh's pod was gone"}[highUp.Before(vs[0].gone)])
	}
	if len(atRisk) > 0 {
		figures += fmt.Sprintf("; trainguard_work_at_risk_steps %v", atRisk)
	}
	if victim != "fresh" {
		return figures, fmt.Errorf("Kueue preempted %q, want fresh: preempting deaf loses its %d steps", victim, deafStep)
	}
	// fresh's preStop checkpoint: the step it acknowledged against the step
	// it was at: nothing lost. deaf would have lost every step.
	var ack map[string]any
	err = poll(ctx, time.Second, 90*time.Second, func() (bool, error) {
		a, _, _, err := newestAckBefore(freshDir, time.Now())
		if err != nil || a == nil {
			return false, nil
		}
		ack = a
		return floatTime(num(a, "acked_at")).After(arrived), nil
	})
	if err != nil {
		return figures, fmt.Errorf("fresh acknowledged no termination checkpoint after the preemption: %w", err)
	}
	ackStep := int(num(ack, "step"))
	lostFresh := max(freshStep-ackStep, 0)
	figures += fmt.Sprintf("; fresh acknowledged step %d in its preStop hook: %d steps lost (the other choice, deaf, would have lost %d+ steps)",
		ackStep, lostFresh, deafStep)
	if lostFresh != 0 {
		return figures, fmt.Errorf("fresh lost %d steps", lostFresh)
	}
	return figures, nil
}

// latestStep is the step of the job's checkpoint pointer (0: none).
func latestStep(jobDir string) int {
	b, err := os.ReadFile(filepath.Join(jobDir, "trainguard-latest.json"))
	if err != nil {
		return 0
	}
	var p struct{ Step int }
	if json.Unmarshal(b, &p) != nil {
		return 0
	}
	return p.Step
}
