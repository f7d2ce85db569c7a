package rescheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func TestDecide(t *testing.T) {
	const (
		fs = contract.LabelMindClusterFaultScheduling
		rs = contract.AnnotationMindClusterRecoverStrategy
	)
	notReady := func(since time.Duration) *corev1.Node { return newNode("n1", corev1.ConditionFalse, since) }
	unknown := func(since time.Duration) *corev1.Node { return newNode("n1", corev1.ConditionUnknown, since) }

	type want struct {
		action   Action
		cause    string
		reason   string
		migrate  bool
		newRound bool
		requeue  time.Duration
		message  string // substring
		stop     bool   // StopInPlace
	}
	graceful := func(cause string) want {
		return want{action: ActionEvict, cause: cause, reason: ReasonGracefulDelete, migrate: true, newRound: true}
	}
	permanent := want{action: ActionNone, cause: ReasonPermanentFailure, reason: ReasonPermanentFailure}
	inPlace := want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonRestartInPlace}
	nothing := want{action: ActionNone}

	cases := []struct {
		name             string
		pod              *corev1.Pod
		node             *corev1.Node
		defaultRetryable bool
		defaultFS        string
		history          History
		max              int
		want             want
	}{
		// Exit codes (kubeflow's ExitCode table).
		{name: "exit 0", pod: newPod(exited(0, "Completed")), node: readyNode(), want: nothing},
		{name: "exit 1 permanent", pod: newPod(exited(1, "Error")), node: readyNode(), want: permanent},
		{name: "exit 2 permanent", pod: newPod(exited(2, "Error")), node: readyNode(), want: permanent},
		{name: "exit 126 permanent", pod: newPod(exited(126, "Error")), node: readyNode(), want: permanent},
		{name: "exit 127 permanent", pod: newPod(exited(127, "Error")), node: readyNode(), want: permanent},
		{name: "exit 128 permanent", pod: newPod(exited(128, "ContainerCannotRun")), node: readyNode(), want: permanent},
		{name: "exit 139 retryable", pod: newPod(exited(139, "Error")), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "exit 130 retryable", pod: newPod(exited(130, "Error")), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "exit 137 retryable", pod: newPod(exited(137, "Error")), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "exit 143 retryable", pod: newPod(exited(143, "Error")), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "exit 138 user-retryable", pod: newPod(exited(138, "Error")), node: readyNode(),
			want: want{action: ActionEvict, cause: ReasonRetryableExit, reason: ReasonGracefulDelete, migrate: true, newRound: true, message: "user-retryable"}},
		{name: "undefined exit 3, default permanent", pod: newPod(exited(3, "Error")), node: readyNode(),
			want: want{action: ActionNone, cause: ReasonPermanentFailure, reason: ReasonPermanentFailure, message: "undefined"}},
		{name: "undefined exit 134, default retryable", pod: newPod(exited(134, "Error")), node: readyNode(), defaultRetryable: true,
			want: graceful(ReasonRetryableExit)},
		{name: "OOMKilled", pod: newPod(exited(137, "OOMKilled")), node: readyNode(),
			want: want{action: ActionEvict, cause: ReasonRetryableExit, reason: ReasonGracefulDelete, migrate: true, newRound: true, message: "OOMKilled"}},
		{name: "Evicted", pod: newPod(podReason("Evicted")), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "OutOf GPU at admission", pod: newPod(podReason("OutOfnvidia.com/gpu")), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "UnexpectedAdmissionError", pod: newPod(podReason("UnexpectedAdmissionError")), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "node shutdown", pod: newPod(podReason("Terminated")), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "DeadlineExceeded", pod: newPod(podReason("DeadlineExceeded")), node: readyNode(), want: permanent},
		{name: "failed without status, default permanent", pod: newPod(podReason("")), node: readyNode(), want: permanent},
		{name: "failed without status, default retryable", pod: newPod(podReason("")), node: readyNode(), defaultRetryable: true, want: graceful(ReasonRetryableExit)},
		{name: "failed after disruption", pod: newPod(podReason(""), disruption), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "crash loop on retryable code, recover: migrated", pod: newPod(annotation(rs, "recover"), crashLooping(143, 1)), node: readyNode(),
			want: graceful(ReasonRetryableExit)},
		{name: "sidecar failure counts when trainer did not end", pod: newPod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{
				{Name: "pytorch", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{Name: "sidecar", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}},
			}
		}), node: readyNode(), want: permanent},
		{name: "training container wins over sidecar", pod: newPod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{
				{Name: "sidecar", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}},
				{Name: "pytorch", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}},
			}
		}), node: readyNode(), want: graceful(ReasonRetryableExit)},
		{name: "succeeded pod", pod: newPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), node: nil, want: nothing},
		{name: "unscheduled pod", pod: newPod(func(p *corev1.Pod) { p.Spec.NodeName = "" }), node: nil, want: nothing},

		// Node states.
		{name: "node ready", pod: newPod(), node: readyNode(), want: nothing},
		{name: "node NotReady within grace", pod: newPod(), node: notReady(20 * time.Second),
			want: want{action: ActionWait, requeue: 40 * time.Second}},
		{name: "node NotReady past grace", pod: newPod(), node: notReady(61 * time.Second), want: graceful(ReasonNodeLost)},
		{name: "node Unknown within grace", pod: newPod(), node: unknown(59 * time.Second),
			want: want{action: ActionWait, requeue: time.Second}},
		{name: "node Unknown past grace", pod: newPod(), node: unknown(5 * time.Minute), want: graceful(ReasonNodeLost)},
		{name: "node without Ready condition", pod: newPod(), node: func() *corev1.Node {
			n := readyNode()
			n.Status.Conditions = nil
			return n
		}(), want: graceful(ReasonNodeLost)},
		{name: "node deleted", pod: newPod(), node: nil, want: graceful(ReasonNodeLost)},
		// A cordon is not a failure; a drain's eviction is under way already.
		{name: "node cordoned", pod: newPod(), node: cordoned(readyNode()), want: nothing},
		{name: "node cordoned and tainted unschedulable", pod: newPod(), node: func() *corev1.Node {
			n := cordoned(readyNode())
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
			return n
		}(), want: nothing},
		{name: "DisruptionTarget condition", pod: newPod(disruption), node: readyNode(), want: nothing},
		{name: "DisruptionTarget on a cordoned node", pod: newPod(disruption), node: cordoned(readyNode()), want: nothing},
		{name: "permanent exit on a lost node stays permanent", pod: newPod(exited(1, "Error")), node: nil, want: permanent},

		// fault-scheduling.
		{name: "grace", pod: newPod(label(fs, "grace")), node: nil, want: graceful(ReasonNodeLost)},
		{name: "force", pod: newPod(label(fs, "force")), node: nil,
			want: want{action: ActionForceDelete, cause: ReasonNodeLost, reason: ReasonForceDelete, migrate: true, newRound: true}},
		{name: "force, node unreachable below --force-delete-after: evicted now", pod: newPod(label(fs, "force")), node: unknown(2 * time.Minute),
			want: want{action: ActionEvictNow, cause: ReasonNodeLost, reason: ReasonForceDelete, migrate: true, newRound: true, message: "PodDisruptionBudgets hold"}},
		{name: "force, node unreachable past --force-delete-after", pod: newPod(label(fs, "force")), node: unknown(5 * time.Minute),
			want: want{action: ActionForceDelete, cause: ReasonNodeLost, reason: ReasonForceDelete, migrate: true, newRound: true, message: "past --force-delete-after"}},
		{name: "force on retryable exit, healthy node: evicted now", pod: newPod(label(fs, "force"), exited(137, "Error")), node: readyNode(),
			want: want{action: ActionEvictNow, cause: ReasonRetryableExit, reason: ReasonForceDelete, migrate: true, newRound: true}},
		{name: "off", pod: newPod(label(fs, "off")), node: nil,
			want: want{action: ActionNone, cause: ReasonNodeLost, reason: ReasonFaultSchedulingOff}},
		{name: "off on retryable exit", pod: newPod(label(fs, "off"), exited(137, "Error")), node: readyNode(),
			want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonFaultSchedulingOff}},
		{name: "absent: config default force", pod: newPod(), node: nil, defaultFS: "force",
			want: want{action: ActionForceDelete, cause: ReasonNodeLost, reason: ReasonForceDelete, migrate: true, newRound: true}},
		{name: "invalid falls back to default", pod: newPod(label(fs, "sometimes")), node: nil,
			want: want{action: ActionEvict, cause: ReasonNodeLost, reason: ReasonGracefulDelete, migrate: true, newRound: true, message: `"sometimes" ignored`}},

		// recover vs recover-in-place.
		{name: "recover migrates", pod: newPod(annotation(rs, "recover")), node: nil, want: graceful(ReasonNodeLost)},
		{name: "recover-in-place on retryable exit", pod: newPod(annotation(rs, "recover-in-place"), exited(137, "Error")), node: readyNode(),
			want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonRestartInPlace}},
		{name: "recover-in-place on lost node", pod: newPod(annotation(rs, "recover-in-place")), node: nil,
			want: want{action: ActionNone, cause: ReasonNodeLost, reason: ReasonRestartInPlace}},
		{name: "both: lost node migrates", pod: newPod(annotation(rs, "recover,recover-in-place")), node: nil, want: graceful(ReasonNodeLost)},
		{name: "both: retryable exit of a failed pod migrates", pod: newPod(annotation(rs, "recover-in-place,recover"), exited(143, "Error")), node: readyNode(),
			want: graceful(ReasonRetryableExit)},
		{name: "both: crash loop restarts in place", pod: newPod(annotation(rs, "recover-in-place,recover"), crashLooping(143, 1)), node: readyNode(),
			want: inPlace},
		{name: "exit: not retried", pod: newPod(annotation(rs, "exit"), crashLooping(137, 0)), node: readyNode(),
			want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonNotRetried}},
		{name: "exit: not retried on a lost node", pod: newPod(annotation(rs, "exit")), node: nil,
			want: want{action: ActionNone, cause: ReasonNodeLost, reason: ReasonNotRetried}},

		// Process faults (a rank's crash): restarted in place on a healthy
		// node, under every restart policy, never migrated, no bad node.
		{name: "OnFailure: SIGKILL restarts in place", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 0)), node: readyNode(),
			want: inPlace},
		{name: "OnFailure: terminated before the restart", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), terminatedRunning(137, 2)), node: readyNode(),
			want: inPlace},
		{name: "ExitCode (Never) with the restart rules: SIGSEGV restarts in place", pod: newPod(restartPolicy(corev1.RestartPolicyNever), rules, terminatedRunning(139, 0)), node: readyNode(),
			want: inPlace},
		{name: "ExitCode (Never) with the restart rules: peer lost restarts in place", pod: newPod(restartPolicy(corev1.RestartPolicyNever), rules, terminatedRunning(138, 0)), node: readyNode(),
			want: inPlace},
		{name: "ExitCode (Never) with the restart rules: SIGTERM is not a process fault", pod: newPod(restartPolicy(corev1.RestartPolicyNever), rules, exited(143, "Error")), node: readyNode(),
			want: graceful(ReasonRetryableExit)},
		{name: "ExitCode (Never) without the rules: migrated", pod: newPod(restartPolicy(corev1.RestartPolicyNever), exited(137, "Error")), node: readyNode(),
			want: graceful(ReasonRetryableExit)},
		{name: "process fault on a lost node migrates", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 0)), node: nil,
			want: graceful(ReasonRetryableExit)},
		{name: "process fault on a NotReady node within grace restarts in place", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 0)), node: notReady(10 * time.Second),
			want: inPlace},
		{name: "user's exit 1 crash loop stays permanent", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(1, 3)), node: readyNode(), want: permanent},
		{name: "in-place restarts below the cap", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 9)), node: readyNode(),
			want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonRestartInPlace, message: "restart 10/10"}},
		{name: "in-place restarts at the cap", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 10)), node: readyNode(),
			want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonInPlaceRestartCapReached, message: "10/10", stop: true}},
		{name: "in-place restarts at a job's lower cap", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(139, 2)), node: readyNode(), max: 2,
			want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonInPlaceRestartCapReached, message: "own restart policy", stop: true}},
		// Bounded: the count is the job's (the record keeps the
		// highest restart count seen); at the cap the in-place path stops.
		{name: "the job's count numbers a pod's restart", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 0)), node: readyNode(),
			history: History{InPlaceRestarts: 3}, want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonRestartInPlace, message: "restart 4/10"}},
		{name: "the job's count reaches the cap for a pod that restarted less", pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 1)), node: readyNode(),
			history: History{InPlaceRestarts: 10}, want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonInPlaceRestartCapReached, message: "10/10", stop: true}},
		{name: "ExitCode (Never) with trainguard's rules at the cap: evicted once, no bad node", pod: newPod(restartPolicy(corev1.RestartPolicyNever), rules, crashLooping(139, 2)), node: readyNode(), max: 2,
			want: want{action: ActionEvict, cause: ReasonRetryableExit, reason: ReasonInPlaceRestartCapReached, message: "evicted once", stop: true}},
		{name: "stopped: a pod below the cap stops too", pod: newPod(restartPolicy(corev1.RestartPolicyNever), rules, terminatedRunning(138, 0)), node: readyNode(),
			history: History{InPlaceRestarts: 2, InPlaceStopped: true},
			want:    want{action: ActionEvict, cause: ReasonRetryableExit, reason: ReasonInPlaceRestartCapReached, stop: true}},
		{name: "the user's own restart rules at the cap: not evicted", pod: newPod(restartPolicy(corev1.RestartPolicyNever), func(p *corev1.Pod) {
			rules(p)
			p.Spec.Containers[0].RestartPolicyRules[0].ExitCodes.Values = []int32{139}
		}, crashLooping(139, 10)), node: readyNode(),
			want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonInPlaceRestartCapReached, stop: true}},
		{name: "a bare pod with trainguard's rules at the cap: not evicted (nobody would recreate it)", pod: newPod(bare, restartPolicy(corev1.RestartPolicyNever), rules, crashLooping(139, 10)), node: readyNode(),
			want: want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonInPlaceRestartCapReached, stop: true}},
		{name: "stopped: a failed pod's process fault is left to the operator, not migrated", pod: newPod(restartPolicy(corev1.RestartPolicyNever), exited(139, "Error")), node: readyNode(),
			history: History{InPlaceRestarts: 10, InPlaceStopped: true},
			want:    want{action: ActionNone, cause: ReasonRetryableExit, reason: ReasonInPlaceRestartCapReached, message: "left to the operator's restart policy"}},
		{name: "stopped: SIGTERM is not a process fault, migrated", pod: newPod(restartPolicy(corev1.RestartPolicyNever), exited(143, "Error")), node: readyNode(),
			history: History{InPlaceStopped: true}, want: graceful(ReasonRetryableExit)},
		{name: "stopped: a node fault still migrates", pod: newPod(), node: nil, history: History{InPlaceStopped: true}, want: graceful(ReasonNodeLost)},
		{name: "stopped: the user's exit 1 stays permanent", pod: newPod(restartPolicy(corev1.RestartPolicyNever), exited(1, "Error")), node: readyNode(),
			history: History{InPlaceStopped: true}, want: permanent},
		{name: "trainguard.io annotation when MindCluster's is absent", pod: newPod(annotation(contract.AnnotationRecoverStrategy, "recover-in-place")), node: nil,
			want: want{action: ActionNone, cause: ReasonNodeLost, reason: ReasonRestartInPlace}},

		// Terminating pods.
		{name: "terminating on healthy node", pod: newPod(terminating(time.Hour)), node: readyNode(), want: nothing},
		{name: "terminating on lost node, grace not over", pod: newPod(terminating(100 * time.Second)), node: nil,
			want: want{action: ActionWait, requeue: 800 * time.Second}},
		{name: "terminating on lost node, grace over", pod: newPod(terminating(901 * time.Second)), node: nil,
			want: want{action: ActionForceDelete, cause: ReasonNodeLost, reason: ReasonForceDelete}},
		{name: "terminating on lost node, grace over, node not unreachable long enough", pod: newPod(terminating(901 * time.Second)), node: notReady(2 * time.Minute),
			want: want{action: ActionWait, requeue: 3 * time.Minute}},
		{name: "terminating on lost node, force", pod: newPod(terminating(time.Second), label(fs, "force")), node: nil,
			want: want{action: ActionForceDelete, cause: ReasonNodeLost, reason: ReasonForceDelete}},
		{name: "terminating on lost node, off", pod: newPod(terminating(time.Hour), label(fs, "off")), node: nil, want: nothing},
		{name: "terminating, already forced", pod: newPod(terminating(time.Hour), func(p *corev1.Pod) {
			p.DeletionGracePeriodSeconds = new(int64)
		}), node: nil, want: nothing},

		// Cap and backoff.
		{name: "cap reached", pod: newPod(), node: nil, history: History{Reschedules: 10, RoundStart: t0.Add(-time.Hour)},
			want: want{action: ActionNone, cause: ReasonNodeLost, reason: ReasonRescheduleCapReached}},
		{name: "cap 0", pod: newPod(), node: nil, max: -1,
			want: want{action: ActionNone, cause: ReasonNodeLost, reason: ReasonRescheduleCapReached}},
		{name: "cap reached, node already recorded: same incident", pod: newPod(), node: nil,
			history: History{Reschedules: 10, RoundStart: t0.Add(-time.Hour), NodeRecorded: true},
			want:    want{action: ActionEvict, cause: ReasonNodeLost, reason: ReasonGracefulDelete, migrate: true}},
		{name: "joins the open round", pod: newPod(), node: nil, history: History{Reschedules: 3, RoundStart: t0.Add(-5 * time.Second)},
			want: want{action: ActionEvict, cause: ReasonNodeLost, reason: ReasonGracefulDelete, migrate: true}},
		{name: "backoff pending", pod: newPod(), node: nil, history: History{Reschedules: 3, RoundStart: t0.Add(-15 * time.Second)},
			want: want{action: ActionWait, cause: ReasonNodeLost, reason: ReasonBackoffPending, requeue: 25 * time.Second}},
		{name: "backoff over", pod: newPod(), node: nil, history: History{Reschedules: 3, RoundStart: t0.Add(-40 * time.Second)},
			want: graceful(ReasonNodeLost)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := DefaultOptions()
			opts.ForceDeleteAfter.Duration = 5 * time.Minute // the table's bound, independent of the default
			opts.UnknownExitCodeRetryable = tc.defaultRetryable
			capN := tc.max
			switch capN {
			case 0:
				capN = 10
			case -1:
				capN = 0
			}
			in := Input{
				Pod: tc.pod, Node: tc.node, Now: t0,
				DefaultFaultScheduling: tc.defaultFS, TrainingContainers: []string{"pytorch"},
				MaxReschedules: capN, History: tc.history,
			}
			d := Decide(in, opts)
			// The cache holds pods and nodes stripped by TransformPod and
			// TransformNode: they must decide exactly the same.
			stripped := in
			tp, err := stripPod(tc.pod.DeepCopy())
			assert.NoError(t, err)
			stripped.Pod = tp.(*corev1.Pod)
			if tc.node != nil {
				tn, err := TransformNode(tc.node.DeepCopy())
				assert.NoError(t, err)
				stripped.Node = tn.(*corev1.Node)
			}
			assert.Equal(t, d, Decide(stripped, opts), "the cache's stripped pod and node decide the same")
			got := want{action: d.Action, cause: d.Cause, reason: d.Reason, migrate: d.Migrate, newRound: d.NewRound, requeue: d.RequeueAfter, message: tc.want.message, stop: d.StopInPlace}
			assert.Equal(t, tc.want, got, "message: %s", d.Message)
			if tc.want.message != "" {
				assert.Contains(t, d.Message, tc.want.message)
			}
			if d.Reason != "" {
				assert.NotEmpty(t, d.Message, "every reported decision explains itself")
			}
		})
	}
}

// Each in-place restart is reported once (its own decision annotation
// value); other decisions once per pod.
func TestDecideInPlaceRestartIsReportedOncePerRestart(t *testing.T) {
	decide := func(restarts int32) Decision {
		return Decide(Input{Pod: newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, restarts)), Node: readyNode(), Now: t0, MaxReschedules: 10}, DefaultOptions())
	}
	assert.Equal(t, "RestartInPlace/1", decide(0).once())
	assert.Equal(t, "RestartInPlace/2", decide(1).once())
	assert.Equal(t, ReasonInPlaceRestartCapReached, decide(10).once())
	assert.Equal(t, ReasonPermanentFailure, Decide(Input{Pod: newPod(exited(1, "Error")), Node: readyNode(), Now: t0, MaxReschedules: 10}, DefaultOptions()).once())
}

func TestDecideReportsExitCode(t *testing.T) {
	d := Decide(Input{Pod: newPod(exited(127, "Error")), Node: readyNode(), Now: t0, MaxReschedules: 10}, DefaultOptions())
	if assert.NotNil(t, d.ExitCode) {
		assert.EqualValues(t, 127, *d.ExitCode)
	}
	assert.True(t, strings.Contains(d.Message, "command not found"), d.Message)
}

func TestBackoffGrowsAndCaps(t *testing.T) {
	o := DefaultOptions()
	var got []time.Duration
	for n := 1; n <= 8; n++ {
		got = append(got, backoff(o, n))
	}
	assert.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}, got)
}

// The trainer restarts the SDK's supervisor made inside a container count
// toward the job's in-place cap: reported in the termination message (and
// kept by the pod cache's transform), added to the container's restarts.
func TestDecideCountsTheSupervisorsInProcessRestarts(t *testing.T) {
	decide := func(restarts int32, message string) Decision {
		pod := newPod(restartPolicy(corev1.RestartPolicyNever), rules, terminatedRunning(137, restarts))
		pod.Status.ContainerStatuses[0].State.Terminated.Message = message
		cached, err := stripPod(pod)
		if err != nil {
			t.Fatal(err)
		}
		return Decide(Input{Pod: cached.(*corev1.Pod), Node: readyNode(), Now: t0, MaxReschedules: 5}, DefaultOptions())
	}
	d := decide(1, "user's own words\ntrainguard.io/inprocess-restarts 2\n")
	assert.Equal(t, ReasonRestartInPlace, d.Reason, d.Message)
	assert.Contains(t, d.Message, "restart 4/5")
	assert.Equal(t, 3, d.InPlaceRestarts, "recorded: the kubelet's 1 and the supervisor's 2")
	d = decide(0, "trainguard.io/inprocess-restarts 5\ntrainguard.io/checkpoint {}")
	assert.Equal(t, ReasonInPlaceRestartCapReached, d.Reason, d.Message)
	assert.True(t, d.StopInPlace)
	assert.Contains(t, d.Message, "5/5")
	for _, junk := range []string{"trainguard.io/inprocess-restarts -4", "trainguard.io/inprocess-restarts x"} {
		d = decide(0, junk)
		assert.Equal(t, ReasonRestartInPlace, d.Reason, "%q: %s", junk, d.Message)
	}
	// The container's own line can only bring its job's cap nearer.
	assert.Equal(t, ReasonInPlaceRestartCapReached, decide(0, "trainguard.io/inprocess-restarts 99999999999999").Reason)
}
