package outcome

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/controllers/ownerchain"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

func terminated(msg string, at time.Time) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ExitCode: 143, Message: msg, FinishedAt: metav1.NewTime(at)}
}

func TestItemsOf(t *testing.T) {
	now := time.Now()
	line := contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 1, Bytes: 1, Seconds: 1}.Line()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1", Labels: map[string]string{contract.LabelManaged: "true"}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "pytorch", RestartCount: 2, State: corev1.ContainerState{Terminated: terminated(line, now)},
				LastTerminationState: corev1.ContainerState{Terminated: terminated("garbage "+line, now)}},
			{Name: "sidecar", State: corev1.ContainerState{Terminated: terminated("user message only", now)}},
			{Name: "running", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
	items := itemsOf(pod)
	require.Len(t, items, 2, "the current and the last termination of pytorch; nothing from containers without the line")
	assert.Equal(t, int32(2), items[0].Restart)
	assert.Equal(t, int32(1), items[1].Restart, "lastState belongs to the previous run")

	pod.Labels = nil
	assert.Empty(t, itemsOf(pod), "unmanaged pods are not read")
}

func newTestReconciler(t *testing.T, nsAnnotations map[string]string) (*Reconciler, *events.FakeRecorder) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Annotations: nsAnnotations}}
	c := fake.NewClientBuilder().WithObjects(ns).Build()
	m := newMetrics()
	require.NoError(t, m.register(prometheus.NewRegistry()))
	rec := events.NewFakeRecorder(10)
	return &Reconciler{client: c, apiReader: c, recorder: rec, cfg: configv1alpha1.Default(), metrics: m, chains: ownerchain.New(jobs.Builtin()),
		seen: map[types.UID]map[string]bool{}, inited: map[string]bool{}, started: time.Now()}, rec
}

func TestReconcileOnceAndForget(t *testing.T) {
	r, rec := newTestReconciler(t, map[string]string{contract.AnnotationInject: contract.InjectEnabled})
	ctx := logr.NewContext(context.Background(), logr.Discard())
	it := item{Namespace: "team", Pod: "p", UID: "u1", Container: "pytorch", Message: contract.CheckpointOutcome{Outcome: contract.OutcomeTimeout, Step: 3, Seconds: 60}.Line(), Finished: time.Now()}
	for range 3 {
		_, err := r.Reconcile(ctx, it)
		require.NoError(t, err)
	}
	require.Len(t, rec.Events, 1, "one Event however often the termination is seen")
	assert.Contains(t, <-rec.Events, "Warning CheckpointTimeout container pytorch: checkpoint not acknowledged within 60.0s")
	assert.Equal(t, 1.0, testutil.ToFloat64(r.metrics.total.WithLabelValues(contract.OutcomeTimeout, CauseUnknown, "team")))
	assert.Equal(t, len(contract.CheckpointOutcomes())*len(Causes()), testutil.CollectAndCount(r.metrics.total),
		"every outcome and cause of the namespace exists, at zero until it happens")

	_, err := r.Reconcile(ctx, item{UID: "u1", Forget: true})
	require.NoError(t, err)
	assert.Empty(t, r.seen, "a deleted pod's entries are dropped")
}

func TestReconcileSkips(t *testing.T) {
	ctx := logr.NewContext(context.Background(), logr.Discard())
	line := contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 1, Bytes: 1, Seconds: 1}.Line()

	r, rec := newTestReconciler(t, map[string]string{contract.AnnotationInject: contract.InjectEnabled})
	old := item{Namespace: "team", Pod: "p", UID: "u1", Container: "c", Message: line, Finished: time.Now().Add(-time.Hour)}
	_, _ = r.Reconcile(ctx, old)
	assert.Empty(t, rec.Events, "terminations from long before the controller started are not reported again")

	garbage := item{Namespace: "team", Pod: "p", UID: "u2", Container: "c", Message: contract.CheckpointOutcomePrefix + "{", Finished: time.Now()}
	_, _ = r.Reconcile(ctx, garbage)
	_, _ = r.Reconcile(ctx, garbage)
	assert.Empty(t, rec.Events)
	assert.Equal(t, 1.0, testutil.ToFloat64(r.metrics.invalid), "an invalid message counts once")

	r, rec = newTestReconciler(t, nil)
	_, _ = r.Reconcile(ctx, item{Namespace: "team", Pod: "p", UID: "u3", Container: "c", Message: line, Finished: time.Now()})
	assert.Empty(t, rec.Events, "not opted in")
	_, _ = r.Reconcile(ctx, item{Namespace: "kube-system", Pod: "p", UID: "u4", Container: "c", Message: line, Finished: time.Now()})
	assert.Empty(t, rec.Events, "excluded namespace")
}

// Why the pod stopped: the DisruptionTarget condition's reason decides, then
// a suspended job (by Kueue when it carries a queue), then a deletion.
func TestCauseOf(t *testing.T) {
	ctx := logr.NewContext(context.Background(), logr.Discard())
	r, _ := newTestReconciler(t, nil)
	for _, tc := range []struct {
		it          item
		cause, want string
	}{
		{item{Disruption: "PreemptionByScheduler", Deleting: true}, CausePreemption, "preempted by kube-scheduler"},
		{item{Disruption: "EvictionByEvictionAPI", Deleting: true}, CauseEviction, "evicted through the Eviction API"},
		{item{Disruption: "TerminationByKubelet"}, CauseEviction, "stopped by its kubelet"},
		{item{Disruption: "DeletionByTaintManager", Deleting: true}, CauseNodeLost, "taint manager"},
		{item{Disruption: "DeletionByPodGC", Deleting: true}, CauseNodeLost, "pod garbage collector"},
		{item{Disruption: "DeletionByTrainguardNodeLost", Deleting: true}, CauseNodeLost, "trainguard's rescheduler"},
		{item{Disruption: "SomethingNew", Deleting: true}, CauseUnknown, `DisruptionTarget "SomethingNew"`},
		{item{Deleting: true}, CauseDeletion, "the pod was deleted"},
		{item{}, CauseUnknown, ""},
	} {
		got := r.causeOf(ctx, tc.it)
		assert.Equal(t, tc.cause, got.cause, "%+v", tc.it)
		if tc.want == "" {
			assert.Empty(t, got.words)
		} else {
			assert.Contains(t, got.words, tc.want)
		}
		assert.Contains(t, Causes(), got.cause)
	}
}

func TestDescribe(t *testing.T) {
	reason, typ, note := describe("pytorch", contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 1200, Bytes: 3 << 30, Seconds: 12.34})
	assert.Equal(t, []string{ReasonSaved, "Normal", "container pytorch: checkpoint saved at step 1200 (3.0 GiB) in 12.3s"}, []string{reason, typ, note})
	for o, want := range map[string]string{contract.OutcomeTimeout: ReasonTimeout, contract.OutcomeNoTrainer: ReasonNoTrainer, contract.OutcomeFailed: ReasonFailed} {
		reason, typ, _ := describe("c", contract.CheckpointOutcome{Outcome: o})
		assert.Equal(t, want, reason)
		assert.Equal(t, "Warning", typ)
	}
	assert.Equal(t, "512 B", humanBytes(512))
	assert.Equal(t, "1.5 MiB", humanBytes(3<<19))
}
