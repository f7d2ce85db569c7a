package rescheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
)

// forbidJob makes the harness's API server refuse reads (get) or patches
// (patch) of the PyTorchJob, as RBAC would.
func (h *harness) forbidJob(t *testing.T, verb string) {
	t.Helper()
	ww, ok := h.c.(client.WithWatch)
	require.True(t, ok)
	gr := schema.GroupResource{Group: "kubeflow.org", Resource: "pytorchjobs"}
	isJob := func(obj client.Object) bool { return obj.GetObjectKind().GroupVersionKind().Kind == "PyTorchJob" }
	h.c = interceptor.NewClient(ww, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if verb == "get" && isJob(obj) {
				return apierrors.NewForbidden(gr, key.Name, nil)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if verb == "patch" && isJob(obj) {
				return apierrors.NewForbidden(gr, obj.GetName(), nil)
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	h.r = h.newReconciler()
}

// TestCapReachedJobPatchForbiddenIsReportedOnce: RBAC refusing the cap mark
// on the job (a TrainJob's before the chart granted it) is reported on the
// pod and the reconcile succeeds; before, it failed and was retried for
// ever, and the cap's Event was never sent.
func TestCapReachedJobPatchForbiddenIsReportedOnce(t *testing.T) {
	pod := newPod()
	rec := recordCM(t, keyOf(pod), Record{Reschedules: 10, RoundStart: t0.Add(-time.Hour)})
	h := newHarness(t, true, pod, lostNode(), rec, pytorchJob())
	h.forbidJob(t, "patch")

	h.reconcile(t, "team", pod.Name)

	evs := strings.Join(h.drainEvents(), "\n")
	assert.Contains(t, evs, "Warning "+ReasonJobNotAccessible)
	assert.Contains(t, evs, "grant trainguard get and patch on trainjobs.trainer.kubeflow.org")
	assert.Contains(t, evs, "Warning "+ReasonRescheduleCapReached)
	got := &corev1.Pod{}
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
	assert.Equal(t, ReasonRescheduleCapReached, got.Annotations[contract.AnnotationDecision], "the decision is remembered: no retry loop")
	h.reconcile(t, "team", pod.Name)
	assert.Empty(t, h.drainEvents(), "reported once")
}

// TestJobReadForbiddenIsReportedAndThePodsPolicyApplies: the job's
// annotations cannot be read; that is said on the pod, and the pod's own
// cap decides.
func TestJobReadForbiddenIsReportedAndThePodsPolicyApplies(t *testing.T) {
	pod := newPod(annotation(contract.AnnotationMaxReschedules, "2"))
	rec := recordCM(t, keyOf(pod), Record{Reschedules: 2, RoundStart: t0.Add(-time.Hour)})
	h := newHarness(t, true, pod, lostNode(), rec, pytorchJob())
	h.forbidJob(t, "get")

	h.reconcile(t, "team", pod.Name)

	evs := strings.Join(h.drainEvents(), "\n")
	assert.Contains(t, evs, "Warning "+ReasonJobNotAccessible)
	assert.Contains(t, evs, "(2/2)")
	assert.Zero(t, h.removals())
}

// TestOwnerOfAnUnknownKindIsNeverReadOrPatched: a pod whose controller
// reference names its Namespace (or anything but a training job) does not
// make the rescheduler read that object's annotations as policy or write
// the cap mark on it.
func TestOwnerOfAnUnknownKindIsNeverReadOrPatched(t *testing.T) {
	ns := optedIn()
	ns.UID = "ns-uid"
	for _, owner := range []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "Namespace", Name: "team", UID: "ns-uid", Controller: ptr.To(true)},
		{APIVersion: "v1", Kind: "Pod", Name: "victim", UID: "victim-uid", Controller: ptr.To(true)},
	} {
		t.Run(owner.Kind, func(t *testing.T) {
			pod := newPod(annotation(contract.AnnotationMaxReschedules, "1"))
			pod.OwnerReferences = []metav1.OwnerReference{owner}
			victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "victim", UID: "victim-uid",
				Annotations: map[string]string{contract.AnnotationMaxReschedules: "50"}}}
			rec := recordCM(t, keyOf(pod), Record{Reschedules: 1, RoundStart: t0.Add(-time.Hour)})
			h := newHarness(t, false, pod, lostNode(), rec, victim)
			require.NoError(t, h.c.Update(context.Background(), ns.DeepCopy()))

			h.reconcile(t, "team", pod.Name)

			assert.Zero(t, h.removals(), "the pod's cap of 1 applies, not the owner's annotation")
			gotNS := &corev1.Namespace{}
			require.NoError(t, h.c.Get(context.Background(), client.ObjectKey{Name: "team"}, gotNS))
			assert.NotContains(t, gotNS.Annotations, contract.AnnotationReschedulesExhausted)
			gotVictim := &corev1.Pod{}
			require.NoError(t, h.c.Get(context.Background(), client.ObjectKeyFromObject(victim), gotVictim))
			assert.NotContains(t, gotVictim.Annotations, contract.AnnotationReschedulesExhausted)
		})
	}
}

// A node lost once is avoided by preference only; a pod of the job placed
// on it after that (created later) that fails there again makes it
// required. Pods of one incident, all created before the record, count
// once. The strikes survive the ConfigMap round trip and expire with the
// node's record.
func TestBadNodeStrikes(t *testing.T) {
	const ttl = time.Hour
	before, after := t0.Add(-time.Minute), t0.Add(time.Minute)
	var rec Record
	rec.AddNode("b", before, t0, ttl, 16)
	rec.AddNode("b", before, t0.Add(2*time.Second), ttl, 16) // a second rank of the same incident
	assert.Equal(t, podspec.Avoid{Preferred: []string{"b"}}, rec.Avoid(t0.Add(3*time.Second), 16))

	key := keyOf(newPod())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RecordName(key), Namespace: ownNS}}
	require.NoError(t, rec.encodeInto(cm, key))
	rec, err := decodeRecord(cm, key)
	require.NoError(t, err)

	rec.AddNode("b", after, after.Add(time.Second), ttl, 16)
	rec.AddNode("c", before, after.Add(time.Second), ttl, 16)
	assert.Equal(t, podspec.Avoid{Required: []string{"b"}, Preferred: []string{"c"}}, rec.Avoid(after.Add(2*time.Second), 16))
	require.NoError(t, rec.encodeInto(cm, key))
	rec, err = decodeRecord(cm, key)
	require.NoError(t, err)
	assert.Equal(t, 2, rec.Strikes["b"].Count)

	// Expired, b starts over at one strike.
	later := after.Add(2 * ttl)
	rec.AddNode("b", later, later, ttl, 16)
	assert.Equal(t, podspec.Avoid{Preferred: []string{"b"}}, rec.Avoid(later, 16))

	// A record written before strikes were kept: every node failed once.
	old := &corev1.ConfigMap{ObjectMeta: cm.ObjectMeta, Data: map[string]string{"job": key.String(), "nodes": `{"x":"` + t0.Add(ttl).Format(time.RFC3339) + `"}`}}
	rec, err = decodeRecord(old, key)
	require.NoError(t, err)
	assert.Equal(t, podspec.Avoid{Preferred: []string{"x"}}, rec.Avoid(t0, 16))
	rec.AddNode("x", t0.Add(time.Minute), t0.Add(2*time.Minute), ttl, 16)
	assert.Equal(t, podspec.Avoid{Required: []string{"x"}}, rec.Avoid(t0.Add(2*time.Minute), 16), "a pod created after x was recorded failed there again")

	for _, bad := range []string{`{"b":{"count":0}}`, `{"b":3}`, `[`} {
		cm.Data[dataStrikes] = bad
		_, err := decodeRecord(cm, key)
		assert.Error(t, err, bad)
	}
}
