package outcome

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/controllers/outcome"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// holdFinalizer keeps a deleted pod in the API server (deletionTimestamp
// set) while the test writes its terminated status, as the kubelet does
// during the grace period.
const holdFinalizer = "test.trainguard.io/hold"

// Why the pod stopped reaches the job's CheckpointSaved Event and the
// metrics' cause and namespace labels: the DisruptionTarget condition the
// stopping component set, a job Kueue suspended, or a plain deletion.
func TestStopCauseInEventAndMetrics(t *testing.T) {
	ns := namespace(t, true)
	cases := []struct {
		name, disruption string
		suspend, queue   bool
		cause, words     string
	}{
		{"scheduler", "PreemptionByScheduler", false, false, outcome.CausePreemption, "preempted by kube-scheduler"},
		{"drain", "EvictionByEvictionAPI", false, false, outcome.CauseEviction, "evicted through the Eviction API"},
		{"taint", "DeletionByTaintManager", false, false, outcome.CauseNodeLost, "deleted by the taint manager"},
		{"nodelost", "DeletionByTrainguardNodeLost", false, false, outcome.CauseNodeLost, "deleted by trainguard's rescheduler"},
		{"podgc", "DeletionByPodGC", false, false, outcome.CauseNodeLost, "pod garbage collector"},
		{"kueue", "", true, true, outcome.CausePreemption, `preempted by Kueue (LocalQueue "team-queue"`},
		{"suspended", "", true, false, outcome.CauseSuspension, "the job was suspended"},
		{"deleted", "", false, false, outcome.CauseDeletion, "the pod was deleted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := stoppedJob(t, ns, "cause-"+tc.name, tc.suspend, tc.queue)
			pod := workerOf(t, job)
			labels := map[string]string{"outcome": contract.OutcomeSaved, "cause": tc.cause, "namespace": ns}
			before := counterOf(t, outcome.MetricTotal, labels)
			deleteHeld(t, pod)
			o := contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 40, Bytes: 1 << 20, Seconds: 1.5}
			stopWith(t, pod, tc.disruption, o.Line())

			jobEv := waitEvent(t, ns, job.GetUID(), outcome.ReasonSaved)
			assert.Contains(t, jobEv.Note, "pod "+pod.Name+": container pytorch: checkpoint saved at step 40 (1.0 MiB) in 1.5s; ")
			assert.Contains(t, jobEv.Note, tc.words)
			assert.Contains(t, waitEvent(t, ns, pod.UID, outcome.ReasonSaved).Note, tc.words)
			require.Eventually(t, func() bool { return counterOf(t, outcome.MetricTotal, labels) == before+1 }, waitFor, tick,
				"%s%v", outcome.MetricTotal, labels)
			assert.Len(t, matching(t, outcome.MetricDuration, labels), 1, "the duration carries the same labels")
		})
	}
	// Every outcome and cause of an opted-in namespace exists from its first
	// managed pod on, so the first failure is an increase from 0.
	for _, o := range contract.CheckpointOutcomes() {
		for _, c := range outcome.Causes() {
			assert.Len(t, matching(t, outcome.MetricTotal, map[string]string{"outcome": o, "cause": c, "namespace": ns}), 1, "%s %s", o, c)
		}
	}
	notOptedIn := namespace(t, false)
	assert.Empty(t, matching(t, outcome.MetricTotal, map[string]string{"namespace": notOptedIn}))
}

// stoppedJob is a kubeflow PyTorchJob, suspended (as Kueue preempts it:
// runPolicy.suspend) and in a Kueue LocalQueue when asked.
func stoppedJob(t *testing.T, ns, name string, suspend, queue bool) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("kubeflow.org/v1")
	u.SetKind("PyTorchJob")
	job := jobOf(t, "kubeflow.org/v1", ns, name)
	if !suspend && !queue {
		return job
	}
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(job), u))
		if queue {
			u.SetLabels(map[string]string{outcome.KueueQueueLabel: "team-queue"})
		}
		if suspend {
			require.NoError(t, unstructured.SetNestedField(u.Object, true, "spec", "runPolicy", "suspend"))
		}
		return env.c.Update(context.Background(), u)
	}))
	return u
}

// deleteHeld deletes the pod but keeps it (a finalizer), as a pod in its
// grace period is: deletionTimestamp set.
func deleteHeld(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Pod{}
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		cur.Finalizers = append(cur.Finalizers, holdFinalizer)
		return env.c.Update(ctx, cur)
	}))
	require.NoError(t, env.c.Delete(ctx, pod, client.GracePeriodSeconds(30)))
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &corev1.Pod{}
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
				return client.IgnoreNotFound(err)
			}
			cur.Finalizers = nil
			return env.c.Update(ctx, cur)
		})
	})
}

// stopWith writes, in one status update, what the stopping component and
// the kubelet leave: the DisruptionTarget condition (when reason is set)
// and the container's termination with the agent's message.
func stopWith(t *testing.T, pod *corev1.Pod, reason, message string) {
	t.Helper()
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		if reason != "" {
			s.Conditions = append(s.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: reason, Message: fmt.Sprintf("test: %s", reason), LastTransitionTime: metav1.Now()})
		}
		s.Phase = corev1.PodFailed
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "pytorch", Image: "example.com/train:1", Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 143, Reason: "Error", Message: message, StartedAt: metav1.Now(), FinishedAt: metav1.Now(),
			}},
		}}
	})
}

// Kueue preempts a TrainJob by suspending it (spec.suspend; the JobSet and
// its Jobs follow): the reader finds it through the pod's Job and JobSet.
func TestKueuePreemptedTrainJob(t *testing.T) {
	ns := namespace(t, true)
	tj := trainJob(t, ns, "queued")
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(tj), tj))
		tj.SetLabels(map[string]string{outcome.KueueQueueLabel: "gpu-queue"})
		require.NoError(t, unstructured.SetNestedField(tj.Object, true, "spec", "suspend"))
		return env.c.Update(context.Background(), tj)
	}))
	js := jobSet(t, ns, "queued", controllerRef(tj))
	job := batchJob(t, ns, "queued-node-0", ptr.To(controllerRef(js)))
	pod := trainerPod(t, ns, "queued", jobRef(job))
	deleteHeld(t, pod)
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodFailed
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "node", Image: "example.com/train:1", Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error",
				Message: contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 7, Bytes: 1 << 20, Seconds: 2}.Line(), StartedAt: metav1.Now(), FinishedAt: metav1.Now()}},
		}}
	})
	ev := waitEvent(t, ns, tj.GetUID(), outcome.ReasonSaved)
	assert.Contains(t, ev.Note, `preempted by Kueue (LocalQueue "gpu-queue"`)
	labels := map[string]string{"outcome": contract.OutcomeSaved, "cause": outcome.CausePreemption, "namespace": ns}
	require.Eventually(t, func() bool { return counterOf(t, outcome.MetricTotal, labels) == 1 }, waitFor, tick)
}
