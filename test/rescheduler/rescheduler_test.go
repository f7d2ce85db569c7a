package rescheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// A node NotReady past the grace loses its pods: the pod is deleted with its
// own grace period (the preStop checkpoint runs), the node is recorded for
// the job first, and the replacement the operator creates is admitted with
// the anti-affinity.
func TestNodeNotReadyPastGraceDeletesGracefullyAndReplacementAvoidsNode(t *testing.T) {
	ns := namespace(t)
	bad, good := readyNode(t, ns, "a"), readyNode(t, ns, "b")
	job := pytorchJob(t, ns, "mnist", nil)
	pod := workerOf(t, job).onNode(bad).create(t)
	running(t, pod)
	require.NotNil(t, pod.Spec.TerminationGracePeriodSeconds)

	since := time.Now().Truncate(time.Second)
	setNodeReady(t, bad, corev1.ConditionFalse, since)
	deleting := waitTerminating(t, pod)
	graceEnd := since.Add(testNodeLostGrace)
	assert.False(t, time.Now().Before(graceEnd), "not deleted within the grace")
	require.NotNil(t, deleting.DeletionGracePeriodSeconds)
	assert.Equal(t, *pod.Spec.TerminationGracePeriodSeconds, *deleting.DeletionGracePeriodSeconds,
		"graceful: the pod's own grace period, so the preStop checkpoint runs")
	assert.Positive(t, *deleting.DeletionGracePeriodSeconds)

	rec := record(t, pod)
	require.NotNil(t, rec, "the node is recorded for the job")
	assert.Contains(t, rec.nodes, bad)
	assert.Equal(t, "1", rec.reschedules)
	assert.Equal(t, string(job.GetUID()), rec.cm.Data["jobUID"], "the record names the job it belongs to")
	assert.Empty(t, rec.cm.OwnerReferences, "no cross-namespace owner")
	waitEvent(t, pod, resched.ReasonNodeLost)
	waitEvent(t, pod, resched.ReasonGracefulDelete)

	// The kubelet never confirms (the node is down); the pod is force-deleted
	// and kubeflow recreates it under the same name.
	confirmDeletion(t, pod)
	replacement := workerOf(t, job).create(t)
	assert.Equal(t, []string{bad}, avoidedNodes(t, replacement), "the replacement avoids the lost node")
	assert.Contains(t, replacement.Annotations[contract.AnnotationInjected], contract.InjectionAvoidNodes)
	assert.NotContains(t, avoidedNodes(t, replacement), good)
}

// Exit 137 (SIGKILL) is retryable under kubeflow's ExitCode policy: a pod
// that Failed with it (restartPolicy Never, no restart rule) is rescheduled
// off its node; so is a crash-looping one whose recover-strategy is
// `recover` alone.
func TestExit137IsRescheduled(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy corev1.RestartPolicy
	}{
		{"failed", corev1.RestartPolicyNever},
		{"crash-looping, recover", corev1.RestartPolicyOnFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			node := readyNode(t, ns, "a")
			pod := workerOf(t, pytorchJob(t, ns, "killed", nil)).restartPolicy(tc.policy).
				annotate(contract.AnnotationMindClusterRecoverStrategy, "recover").onNode(node).create(t)
			exited(t, pod, 137)

			if tc.policy == corev1.RestartPolicyNever {
				// The API server removes a Failed pod at once: nothing runs to checkpoint.
				waitDeleted(t, pod)
			} else {
				deleting := waitTerminating(t, pod)
				require.NotNil(t, deleting.DeletionGracePeriodSeconds)
				assert.Equal(t, *pod.Spec.TerminationGracePeriodSeconds, *deleting.DeletionGracePeriodSeconds, "graceful delete")
			}
			exit := waitEvent(t, pod, resched.ReasonRetryableExit)
			assert.Contains(t, exit.Note, "exit code 137")
			waitEvent(t, pod, resched.ReasonGracefulDelete)
			rec := record(t, pod)
			require.NotNil(t, rec)
			assert.Contains(t, rec.nodes, node)
			assert.Equal(t, "1", rec.reschedules)
		})
	}
}

// A process fault (issue 28) on a healthy node with the default
// recover-strategy: the kubelet restarts the container where it is
// (OnFailure crash loop), so the rescheduler neither evicts the pod nor
// records its healthy node as bad; each restart is one Event.
func TestProcessFaultRestartsInPlace(t *testing.T) {
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	pod := workerOf(t, pytorchJob(t, ns, "oom", nil)).restartPolicy(corev1.RestartPolicyOnFailure).onNode(node).create(t)
	exited(t, pod, 137)

	e := waitEvent(t, pod, resched.ReasonRestartInPlace)
	assert.Contains(t, e.Note, "restart 2/10")
	assertUntouched(t, pod) // no eviction, no bad node recorded
	assert.Equal(t, "RestartInPlace/2", getPod(t, pod).Annotations[contract.AnnotationDecision])
}

// Bounded (issue 28): a rank that keeps crashing under kubeflow's ExitCode
// (restartPolicy Never) restarts in place only by trainguard's restart
// rules; at the job's cap the rescheduler records the stop, says so on the
// job (Warning Event, cap annotation), evicts the pod once (no bad node),
// the operator's replacement is admitted without the rules, and its own
// process fault is left to the operator. Before, the kubelet restarted the
// rank in place for ever.
func TestInPlaceRestartsStopAtTheJobsCap(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	job := pytorchJob(t, ns, "segv-loop", map[string]string{contract.AnnotationMaxReschedules: "1"})
	pod := workerOf(t, job).onNode(node).create(t)
	require.Equal(t, contract.InPlaceRestartRules(), pod.Spec.Containers[0].RestartPolicyRules, "Never: the webhook injects the restart rules")
	// The kubelet restarted it in place once (the rules) and it crashed again.
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "pytorch", Image: "example.com/train:1", Started: ptr.To(false), RestartCount: 1,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 139, Reason: "Error", StartedAt: metav1.Now(), FinishedAt: metav1.Now()}}}}
	})

	e := waitEvent(t, pod, resched.ReasonInPlaceRestartCapReached)
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Contains(t, e.Note, "1/1")
	waitTerminating(t, pod)
	rec := record(t, pod)
	require.NotNil(t, rec)
	assert.Empty(t, rec.nodes, "a process fault records no bad node")
	assert.Equal(t, "true", rec.cm.Data["inPlaceStopped"])
	assert.Equal(t, "1", rec.cm.Data["inPlaceRestarts"])
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(job.GroupVersionKind())
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(job), got))
	assert.Equal(t, "1", got.GetAnnotations()[contract.AnnotationReschedulesExhausted])
	require.Eventually(t, func() bool {
		var list eventsv1.EventList
		require.NoError(t, env.c.List(ctx, &list, client.InNamespace(ns)))
		for _, ev := range list.Items {
			if ev.Regarding.Kind == "PyTorchJob" && ev.Regarding.Name == job.GetName() && ev.Reason == resched.ReasonInPlaceRestartCapReached {
				return ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Note, "(1/1, seen at pod segv-loop-worker-0, exit code 139)")
			}
		}
		return false
	}, waitFor, tick, "a Warning Event on the job names the count and the cap")

	// The operator's replacement: no restart rules any more.
	confirmDeletion(t, pod)
	made := workerOf(t, job).onNode(node)
	require.Equal(t, contract.InPlaceRestartRules(), made.pod.Spec.Containers[0].RestartPolicyRules, "the job's template carries the rules")
	replacement := made.create(t)
	assert.Nil(t, replacement.Spec.Containers[0].RestartPolicyRules, "the job's new pods get no restart rules: the pod webhook took the template's out")
	assert.Nil(t, replacement.Spec.Containers[0].RestartPolicy)
	assert.NotContains(t, replacement.Annotations[contract.AnnotationInjected], contract.InjectionRestartRules)
	// Its process fault fails the pod (Never): the operator's policy decides,
	// trainguard neither evicts it nor records its node.
	exited(t, replacement, 139)
	e = waitEvent(t, replacement, resched.ReasonInPlaceRestartCapReached)
	assert.Contains(t, e.Note, "left to the operator's restart policy")
	assertUntouched(t, replacement)
}

// Exit 1 is a permanent failure: the same code would fail again. The pod is
// left alone and an Event says why, once.
func TestExit1IsNotTouched(t *testing.T) {
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	pod := workerOf(t, pytorchJob(t, ns, "buggy", nil)).onNode(node).create(t)
	exited(t, pod, 1)

	e := waitEvent(t, pod, resched.ReasonPermanentFailure)
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Contains(t, e.Note, "exit code 1")
	assertUntouched(t, pod)
	assert.Equal(t, resched.ReasonPermanentFailure, getPod(t, pod).Annotations[contract.AnnotationDecision])
	assert.Equal(t, []string{resched.ReasonPermanentFailure}, reasons(podEvents(t, pod)), "reported once, no other decision")
}

// recover-in-place: the kubelet restarts the container where it is; the
// rescheduler does not migrate the pod.
func TestRecoverInPlaceIsNotMigrated(t *testing.T) {
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	pod := workerOf(t, pytorchJob(t, ns, "in-place", nil)).
		annotate(contract.AnnotationMindClusterRecoverStrategy, "recover-in-place").
		restartPolicy(corev1.RestartPolicyOnFailure).
		onNode(node).create(t)
	exited(t, pod, 137) // crash-looping: restarted in place by the kubelet

	waitEvent(t, pod, resched.ReasonRestartInPlace)
	assertUntouched(t, pod)
}

// fault-scheduling=off: hands off, even on a lost node.
func TestFaultSchedulingOffDoesNothing(t *testing.T) {
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	pod := workerOf(t, pytorchJob(t, ns, "hands-off", nil)).
		label(contract.LabelMindClusterFaultScheduling, contract.FaultSchedulingOff).
		onNode(node).create(t)
	running(t, pod)
	setNodeReady(t, node, corev1.ConditionUnknown, time.Now().Add(-time.Hour)) // long past the grace

	waitEvent(t, pod, resched.ReasonFaultSchedulingOff)
	assertUntouched(t, pod)
}

// fault-scheduling=force: the pod is deleted with grace period 0, so it is
// gone at once, and the node is still recorded.
func TestFaultSchedulingForceForceDeletes(t *testing.T) {
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	pod := workerOf(t, pytorchJob(t, ns, "forced", nil)).
		label(contract.LabelMindClusterFaultScheduling, contract.FaultSchedulingForce).
		onNode(node).create(t)
	running(t, pod)
	setNodeReady(t, node, corev1.ConditionUnknown, time.Now().Add(-time.Hour))

	waitGone(t, pod)
	waitEvent(t, pod, resched.ReasonForceDelete)
	rec := record(t, pod)
	require.NotNil(t, rec)
	assert.Contains(t, rec.nodes, node)
}

// A pod held by a finalizer (a batch Job's job-tracking finalizer, which a
// Job with a podFailurePolicy keeps until the pod is terminal) on a node
// that is gone: before the force delete the rescheduler marks it Failed
// with a DisruptionTarget condition, so the Job can release and replace it
// and its pod failure policy can ignore the disruption. Without that the pod
// stays Terminating as long as the dead kubelet never reports.
func TestForceDeleteMarksPodFailedFirst(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	b := workerOf(t, pytorchJob(t, ns, "held", nil)).
		label(contract.LabelMindClusterFaultScheduling, contract.FaultSchedulingForce).onNode(node)
	b.pod.Finalizers = []string{"batch.kubernetes.io/job-tracking"}
	pod := b.create(t)
	t.Cleanup(func() {
		cur := getPod(t, pod)
		if cur != nil {
			cur.Finalizers = nil
			_ = env.c.Update(ctx, cur)
		}
	})
	running(t, pod)
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	})
	setNodeReady(t, node, corev1.ConditionUnknown, time.Now().Add(-time.Hour))

	waitEvent(t, pod, resched.ReasonForceDelete)
	var cur *corev1.Pod
	require.Eventually(t, func() bool {
		cur = getPod(t, pod)
		return cur != nil && cur.DeletionTimestamp != nil
	}, waitFor, tick, "the pod is deleted (and held by its finalizer)")
	assert.Equal(t, corev1.PodFailed, cur.Status.Phase, "marked Failed before the force delete")
	var cond *corev1.PodCondition
	for i := range cur.Status.Conditions {
		if cur.Status.Conditions[i].Type == corev1.DisruptionTarget {
			cond = &cur.Status.Conditions[i]
		}
	}
	require.NotNil(t, cond, "a DisruptionTarget condition, so a pod failure policy can ignore the loss")
	assert.Equal(t, corev1.ConditionTrue, cond.Status)
	assert.Equal(t, resched.ReasonNodeLostDisruption, cond.Reason)
	var scheduled bool
	for _, c := range cur.Status.Conditions {
		scheduled = scheduled || c.Type == corev1.PodScheduled
	}
	assert.True(t, scheduled, "the pod's other conditions are kept (strategic merge by type)")
}

// The cap: after N reschedules the job is left alone and annotated.
func TestRescheduleCapStopsAfterN(t *testing.T) {
	ctx := context.Background()
	const capN = 2
	ns := namespace(t)
	job := pytorchJob(t, ns, "flaky", map[string]string{contract.AnnotationMaxReschedules: "2"})
	var nodes []string
	for i := 0; ; i++ {
		require.LessOrEqual(t, i, capN, "the cap stops the rescheduling after %d rounds", capN)
		node := readyNode(t, ns, string(rune('a'+i)))
		pod := workerOf(t, job).onNode(node).create(t)
		assert.Equal(t, nodes, avoidedNodes(t, pod), "attempt %d avoids the nodes of the earlier ones", i)
		exited(t, pod, 137)
		if i == capN {
			e := waitEvent(t, pod, resched.ReasonRescheduleCapReached)
			assert.Contains(t, e.Note, "2/2")
			cur := getPod(t, pod)
			require.NotNil(t, cur)
			assert.Nil(t, cur.DeletionTimestamp, "not deleted once the cap is reached")
			break
		}
		waitDeleted(t, pod)
		nodes = append(nodes, node)
		rec := record(t, pod)
		require.NotNil(t, rec)
		assert.Equal(t, string(rune('1'+i)), rec.reschedules)
		// Wait out the window in which another failure joins this round
		// (BackoffBase after its start), so each attempt is a round of its own.
		roundStart, err := time.Parse(time.RFC3339, rec.cm.Data["roundStart"])
		require.NoError(t, err)
		require.Eventually(t, func() bool { return time.Now().After(roundStart.Add(testBackoffBase)) }, waitFor, tick)
		confirmDeletion(t, pod)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(job.GroupVersionKind())
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(job), got))
	assert.Equal(t, "2", got.GetAnnotations()[contract.AnnotationReschedulesExhausted])
}

// A bare pod has no operator to recreate it: the rescheduler recreates it,
// under the same name, once the old one is gone, with the anti-affinity.
func TestBarePodIsRecreatedWithAntiAffinity(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	pod := barePod(ns, "elastic-worker-0").onNode(node).create(t)
	running(t, pod)
	setNodeReady(t, node, corev1.ConditionFalse, time.Now().Add(-time.Hour))

	waitTerminating(t, pod)
	rec := record(t, pod)
	require.NotNil(t, rec)
	assert.Contains(t, rec.nodes, node)
	assert.NotEmpty(t, rec.cm.Data["stash"], "the observed pod is stashed before the eviction")
	confirmDeletion(t, pod) // the kubelet is gone; the node lifecycle controller would force it

	var replacement corev1.Pod
	require.Eventually(t, func() bool {
		err := env.c.Get(ctx, client.ObjectKeyFromObject(pod), &replacement)
		return err == nil && replacement.UID != pod.UID
	}, waitFor, tick, "the bare pod is recreated")
	assert.Empty(t, replacement.Spec.NodeName, "left to the scheduler")
	assert.Equal(t, []string{node}, avoidedNodes(t, &replacement))
	assert.Equal(t, "true", replacement.Labels[contract.LabelManaged])
	assert.Equal(t, pod.Spec.Containers[0].Image, replacement.Spec.Containers[0].Image)
	waitEvent(t, &replacement, resched.ReasonBarePodRecreated)
	require.Eventually(t, func() bool {
		rec = record(t, pod)
		return rec != nil && rec.cm.Data["stash"] == ""
	}, waitFor, tick, "the stash is cleared once recreated")
}

// Timers too short for the shared manager: a manager with a short bad-node
// TTL and grace-over-time serves these.
func TestShortTimers(t *testing.T) {
	const ttl, graceOverTime = 3 * time.Second, 2 * time.Second
	env.replaceShared(t)
	opts := defaultOptions()
	opts.BadNodeTTL.Duration = ttl
	opts.GraceOverTime.Duration = graceOverTime
	env.startManagerForTest(t, managerOptions{Rescheduler: opts})

	t.Run("expired record adds no affinity", func(t *testing.T) { testExpiredRecordAddsNoAffinity(t, ttl) })
	t.Run("graceful delete on a lost node is forced after grace-over-time", func(t *testing.T) {
		testGraceOverTimeForcesDelete(t, graceOverTime)
	})
}

// A record past its expiry no longer adds the anti-affinity.
func testExpiredRecordAddsNoAffinity(t *testing.T, ttl time.Duration) {
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	job := pytorchJob(t, ns, "expiring", nil)
	pod := workerOf(t, job).onNode(node).create(t)
	exited(t, pod, 137)
	waitDeleted(t, pod)
	rec := record(t, pod)
	require.NotNil(t, rec)
	expiry := rec.nodes[node]
	require.WithinDuration(t, time.Now().Add(ttl), expiry, ttl, "expires after the TTL")

	dryRun := func() *corev1.Pod {
		p := workerOf(t, job).obj()
		require.NoError(t, env.c.Create(context.Background(), p, client.DryRunAll))
		return p
	}
	require.True(t, time.Now().Before(expiry), "test too slow: the record expired before it was checked")
	assert.Equal(t, []string{node}, avoidedNodes(t, dryRun()), "before the expiry the node is avoided")

	require.Eventually(t, func() bool { return len(avoidedNodes(t, dryRun())) == 0 }, ttl+waitFor, 100*time.Millisecond,
		"after the expiry the node is no longer avoided")
	assert.False(t, time.Now().Before(expiry), "avoided until the expiry")
	replacement := workerOf(t, job).create(t)
	assert.Empty(t, avoidedNodes(t, replacement))
	assert.NotContains(t, replacement.Annotations[contract.AnnotationInjected], contract.InjectionAvoidNodes)
}

// With fault-scheduling=grace, the kubelet of a lost node never confirms the
// delete; after grace-over-time the rescheduler forces it, so the
// replacement (same name) can start.
func testGraceOverTimeForcesDelete(t *testing.T, graceOverTime time.Duration) {
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	pod := workerOf(t, pytorchJob(t, ns, "hanging", nil)).onNode(node).create(t)
	running(t, pod)
	setNodeReady(t, node, corev1.ConditionUnknown, time.Now().Add(-time.Hour))

	deleting := waitTerminating(t, pod)
	requested := deleting.DeletionTimestamp.Add(-time.Duration(*deleting.DeletionGracePeriodSeconds) * time.Second)
	waitEvent(t, pod, resched.ReasonGracefulDelete)
	waitGone(t, pod)
	assert.False(t, time.Now().Before(requested.Add(graceOverTime)), "forced only after grace-over-time")
	e := waitEvent(t, pod, resched.ReasonForceDelete)
	assert.Contains(t, e.Note, "grace-over-time")
}
