package rescheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/jobs"
)

// fakeJobLabel names a FakeJob's job on each of its pods.
const fakeJobLabel = "example.com/fakejob-name"

// fakeKind is a test-only kind, declared as a new adapter would declare
// it (DEVELOPERS.md, "Adding a job kind"): its operator labels each pod
// with the job's name and sets no owner reference.
func fakeKind() *jobs.Adapter {
	gvk := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "FakeJob"}
	return &jobs.Adapter{
		GVK: gvk, Name: "fakejob",
		JobOfPod: func(pod *corev1.Pod) (jobs.PodOwner, bool) {
			name := pod.Labels[fakeJobLabel]
			return jobs.PodOwner{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: name}, name != ""
		},
		JobLabels:     []string{fakeJobLabel},
		PodOwnerChain: []schema.GroupVersionKind{gvk},
	}
}

// A kind added to the kind set the rescheduler is given reaches it: its
// pods' job is found by that kind's labels, the pod cache keeps them, and
// a pod on a lost node is evicted and its node recorded for the job. With
// the built-in kinds alone the same pod is a bare pod, which the
// rescheduler recreates itself.
func TestAKindAddedToTheKindSetIsRescheduled(t *testing.T) {
	kinds := jobs.Builtin().With(fakeKind())
	pod := newPod(func(p *corev1.Pod) {
		p.OwnerReferences = nil
		delete(p.Labels, kubeflowv1.LabelJobName)
		p.Labels[fakeJobLabel] = "train"
	})
	require.True(t, keyOf(pod).Bare(), "the built-in kinds do not know the pod's job")

	h := newHarness(t, false, pod, lostNode())
	h.kinds = kinds
	h.r = h.newReconciler()
	h.reconcile(t, "team", pod.Name)

	key := kinds.KeyOf(pod)
	assert.Equal(t, jobs.Key{Namespace: "team", APIVersion: "example.com/v1", Kind: "FakeJob", Name: "train"}, key)
	assert.False(t, h.podExists(t, "team", pod.Name), "pod evicted")
	require.Len(t, h.evictions, 1, "a job's pod is evicted (its operator recreates it), not recreated as a bare pod")
	_, rec := h.record(t, key)
	assert.Equal(t, map[string]time.Time{"n1": t0.Add(time.Hour)}, rec.Nodes, "the bad node is recorded for the fake kind's job")

	stripped, err := TransformPod(kinds)(pod.DeepCopy())
	require.NoError(t, err)
	assert.Equal(t, "train", stripped.(*corev1.Pod).Labels[fakeJobLabel], "the pod cache keeps the label the kind reads")
}
