//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/trainguard/trainguard/internal/testing/builders"
)

const indexedRanks = 2

// indexedJobDrain: the Job many teams write for multi-node training, an
// Indexed batch/v1 Job of 2 ranks (the example trainer, data-parallel over
// gloo) behind a headless Service, rank 0 found at <job>-0.<service>.
// trainguard injects the Job at its admission (its template shows it),
// keeps the checkpoints in the Job's directory, and when the node of rank 1
// is drained, rank 0 saves and acknowledges; the Job controller replaces
// the pods (the podFailurePolicy ignores the drain's DisruptionTarget), and
// both ranks resume from exactly the acknowledged state: 0 steps lost.
func (e *env) indexedJobDrain(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-indexed-job", true)
	const job = "ranks"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: job, Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Selector: map[string]string{batchv1.JobNameLabel: job},
			Ports:    []corev1.ServicePort{{Name: "rendezvous", Port: 29500, TargetPort: intstr.FromInt32(29500)}}},
	}
	if _, err := e.cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the headless Service: %v", err)
	}
	if _, err := e.cs.BatchV1().Jobs(ns).Create(ctx, indexedTrainJob(ns, job, drainSteps, drainDelay), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the Indexed Job: %v", err)
	}
	created, err := e.cs.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if inj := created.Spec.Template.Annotations["trainguard.io/injected"]; !strings.Contains(inj, "prestop") {
		t.Fatalf("the Job's template was not injected at its admission: trainguard.io/injected=%q", inj)
	}
	e.uncordon(ctx, t)
	var rank0 *corev1.Pod
	if err := poll(ctx, 2*time.Second, 5*time.Minute, func() (bool, error) {
		p, err := e.rankPod(ctx, ns, job, 0)
		if err != nil || p == nil || !running(p) {
			return false, err
		}
		rank0 = p
		return lastStep(e.logs(ctx, ns, p.Name)) >= 15, nil
	}); err != nil {
		t.Fatalf("rank 0 of Job %s/%s never reached step 15: %v (pod %s)", ns, job, err, phase(rank0))
	}
	old, err := e.rankPod(ctx, ns, job, 1)
	if err != nil || old == nil {
		t.Fatalf("rank 1 pod: %v", err)
	}
	node, before := old.Spec.NodeName, lastStep(e.logs(ctx, ns, rank0.Name))
	t.Logf("draining %s (runs rank 1, %s) at rank 0's step %d", node, old.Name, before)
	tDrain := time.Now()
	if _, err := e.kubectl(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s"); err != nil {
		t.Fatalf("drain: %v", err)
	}
	drained := time.Since(tDrain)
	var repl *corev1.Pod
	err = poll(ctx, 2*time.Second, 5*time.Minute, func() (bool, error) {
		p, err := e.rankPod(ctx, ns, job, 1)
		if err != nil || p == nil {
			return false, err
		}
		repl = p
		return p.UID != old.UID && running(p), nil
	})
	_, _ = e.kubectl(ctx, "uncordon", node)
	if err != nil {
		t.Fatalf("replacement of rank 1: %v (pod %s)", err, phase(repl))
	}
	if repl.Spec.NodeName == node {
		t.Fatalf("rank 1's replacement %s runs on the drained node %s", repl.Name, node)
	}
	if err := e.waitBatchJob(ctx, ns, job, 8*time.Minute); err != nil {
		t.Fatal(err)
	}
	jobDir := filepath.Join(e.pvDir(ns), ns, "job.batch", job)
	// 0 steps lost from the Job's own directory, and the outcome on the Job.
	var saved string
	figures, err := e.drainFigures(jobDir, job, tDrain, indexedRanks)
	if err == nil {
		saved, err = e.checkpointSavedEvent(ctx, ns, "Job", job)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.record("indexed-job-drain", true, "rank 1 moved %s → %s; drain took %s; %s; outcome Event on the Job: %s",
		node, repl.Spec.NodeName, drained.Round(time.Second), figures, saved)
}

// indexedTrainJob is the Job users write: Indexed, one pod per rank, the
// trainer as PID 1 with its rank from the completion index, rank 0 at
// <job>-0.<job> (the pod's hostname under the headless Service), and a
// podFailurePolicy that does not count a drain (the builders' default).
func indexedTrainJob(ns, name string, steps int, delay float64) *batchv1.Job {
	return builders.MakeBatchJob(ns, name).With(func(j *batchv1.Job) {
		j.Spec.BackoffLimit = builders.Ptr[int32](6)
		j.Spec.Template.Spec.Subdomain = name
		j.Spec.Template.Spec.TerminationGracePeriodSeconds = builders.Ptr[int64](30)
	}).WithContainer(func(c *corev1.Container) {
		c.Image, c.ImagePullPolicy = trainerImage, corev1.PullNever
		// The rank is the completion index, which the Job controller sets as
		// JOB_COMPLETION_INDEX after the template's env; the command reads it.
		cmd := pid1Command(name, steps, delay)
		c.Command = []string{"python3", "-c", "import os, sys; os.environ['RANK'] = os.environ['JOB_COMPLETION_INDEX']; " +
			"os.makedirs(sys.argv[1], exist_ok=True); os.execvp(sys.argv[2], sys.argv[2:])"}
		for _, a := range cmd[3:] {
			c.Command = append(c.Command, fmt.Sprint(a))
		}
		c.Env = []corev1.EnvVar{{Name: "WORLD_SIZE", Value: fmt.Sprint(indexedRanks)},
			{Name: "MASTER_ADDR", Value: name + "-0." + name}, {Name: "MASTER_PORT", Value: "29500"}}
		c.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: mustQty("50m"), corev1.ResourceMemory: mustQty("200Mi")}}
	}).Obj()
}

// rankPod is the newest live pod of the Job's completion index.
func (e *env) rankPod(ctx context.Context, ns, job string, index int) (*corev1.Pod, error) {
	return e.newestLivePod(ctx, ns, fmt.Sprintf("%s=%s,%s=%d", batchv1.JobNameLabel, job, batchv1.JobCompletionIndexAnnotation, index))
}

// newestLivePod is the newest pod matching selector that is neither
// terminating nor finished; nil when there is none.
func (e *env) newestLivePod(ctx context.Context, ns, selector string) (*corev1.Pod, error) {
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	live := []corev1.Pod{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	sort.Slice(live, func(i, j int) bool { return live[i].CreationTimestamp.After(live[j].CreationTimestamp.Time) })
	return &live[0], nil
}

// waitBatchJob waits for the Job to complete; Failed ends the wait.
func (e *env) waitBatchJob(ctx context.Context, ns, name string, timeout time.Duration) error {
	var last string
	err := poll(ctx, 2*time.Second, timeout, func() (bool, error) {
		j, err := e.cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			last = string(c.Type) + ": " + c.Message
			switch c.Type {
			case batchv1.JobComplete:
				return true, nil
			case batchv1.JobFailed:
				return false, stop(fmt.Errorf("job failed: %s", c.Message))
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("Job %s/%s not complete: %w (last condition %q)", ns, name, err, last)
	}
	return nil
}
