package boost

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

var now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func workload(name, job string, admitted bool, prio int64) *unstructured.Unstructured {
	wl := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"priority": prio},
	}}
	wl.SetGroupVersionKind(WorkloadGVK)
	wl.SetNamespace("team")
	wl.SetName(name)
	wl.SetUID(types.UID("uid-" + name))
	wl.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job, UID: "job-" + types.UID(job), Controller: builders.Ptr(true)}})
	if admitted {
		_ = unstructured.SetNestedSlice(wl.Object, []any{map[string]any{"type": "Admitted", "status": "True"}}, "status", "conditions")
	}
	return wl
}

func trainingPod(name, job, ip string) *corev1.Pod {
	return builders.MakePod("team", name).WithLabel(contract.LabelManaged, "true").With(func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job, UID: "job-" + types.UID(job), Controller: builders.Ptr(true)}}
		p.Spec.TerminationGracePeriodSeconds = builders.Ptr(int64(60))
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, ip
		p.Status.StartTime = &metav1.Time{Time: now.Add(-time.Hour)}
	}).Obj()
}

func setup(t *testing.T, enabled bool, fetch trainerstatus.Fetcher, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Annotations: map[string]string{contract.AnnotationInject: "enabled"}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(append(objs, ns)...).Build()
	cfg := configv1alpha1.Default()
	cfg.PriorityBoost.Enabled = enabled
	return &Reconciler{
		Client: c, Params: ParamsFrom(cfg), Fetch: fetch, Clock: clocktesting.NewFakePassiveClock(now), Kinds: jobs.Builtin(),
		Scope: &policy.Scope{Config: cfg, Namespaces: policy.ClientNamespaces(c)},
	}, c
}

// fetchFrom answers per pod IP; an IP without an answer is a deaf trainer.
func fetchFrom(m map[string]trainerstatus.Status) trainerstatus.Fetcher {
	return func(_ context.Context, ip string) (trainerstatus.Status, error) {
		if s, ok := m[ip]; ok {
			return s, nil
		}
		return trainerstatus.Status{}, errors.New("connection refused")
	}
}

func fresh(sinceCommit float64, save float64) trainerstatus.Status {
	step, at := int64(10), 1e9-sinceCommit
	return trainerstatus.Status{Format: 1, Now: 1e9, Step: 12, CommittedStep: &step, CommittedAt: &at, SaveSeconds: &save}
}

func boostOf(t *testing.T, c client.Client, name string) (string, bool) {
	t.Helper()
	wl := &unstructured.Unstructured{}
	wl.SetGroupVersionKind(WorkloadGVK)
	require.NoError(t, c.Get(context.Background(), types.NamespacedName{Namespace: "team", Name: name}, wl))
	v, ok := wl.GetAnnotations()[Annotation]
	return v, ok
}

func reconcileOne(t *testing.T, r *Reconciler, name string) {
	t.Helper()
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: name}})
	require.NoError(t, err)
}

func TestControllerBoostsTheJobThatWouldLoseMost(t *testing.T) {
	objs := []client.Object{
		workload("wl-fresh", "fresh", true, 100), trainingPod("fresh-0", "fresh", "10.0.0.1"),
		workload("wl-deaf", "deaf", true, 100), trainingPod("deaf-0", "deaf", "10.0.0.2"),
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 150},
	}
	r, c := setup(t, true, fetchFrom(map[string]trainerstatus.Status{"10.0.0.1": fresh(5, 0.2)}), objs...)
	reconcileOne(t, r, "wl-fresh")
	reconcileOne(t, r, "wl-deaf")
	_, ok := boostOf(t, c, "wl-fresh")
	assert.False(t, ok, "a job whose checkpoint fits its grace period gets no boost")
	v, ok := boostOf(t, c, "wl-deaf")
	assert.True(t, ok)
	assert.Equal(t, "49", v, "no listening trainer: the bound, one below the next class (150)")
}

func TestControllerWithoutTheGateWritesNothing(t *testing.T) {
	objs := []client.Object{workload("wl-deaf", "deaf", true, 100), trainingPod("deaf-0", "deaf", "10.0.0.2")}
	r, c := setup(t, false, fetchFrom(nil), objs...)
	reconcileOne(t, r, "wl-deaf")
	_, ok := boostOf(t, c, "wl-deaf")
	assert.False(t, ok)
}

func TestControllerClearsAPendingWorkloadsBoost(t *testing.T) {
	wl := workload("wl", "deaf", false, 100)
	wl.SetAnnotations(map[string]string{Annotation: "100"})
	r, c := setup(t, true, fetchFrom(nil), wl, trainingPod("deaf-0", "deaf", "10.0.0.2"))
	reconcileOne(t, r, "wl")
	_, ok := boostOf(t, c, "wl")
	assert.False(t, ok, "a pending Workload with a boost could preempt its own class")
}

func TestControllerIgnoresOtherWorkloadsAndNamespaces(t *testing.T) {
	other := workload("wl-other", "x", true, 100)
	other.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "x", UID: "u", Controller: builders.Ptr(true)}})
	r, c := setup(t, true, fetchFrom(nil), other, trainingPod("x-0", "x", "10.0.0.3"))
	reconcileOne(t, r, "wl-other")
	_, ok := boostOf(t, c, "wl-other")
	assert.False(t, ok, "not a training job trainguard injects")

	wl := workload("wl", "deaf", true, 100)
	r, c = setup(t, true, fetchFrom(nil), wl, trainingPod("deaf-0", "deaf", "10.0.0.2"))
	require.NoError(t, c.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"trainguard.io/inject":null}}}`))))
	reconcileOne(t, r, "wl")
	_, ok = boostOf(t, c, "wl")
	assert.False(t, ok, "namespace not opted in")
}

func TestControllerWaitsForStartingTrainers(t *testing.T) {
	p := trainingPod("deaf-0", "deaf", "10.0.0.2")
	p.Status.StartTime = &metav1.Time{Time: now.Add(-5 * time.Second)}
	r, c := setup(t, true, fetchFrom(nil), workload("wl", "deaf", true, 100), p)
	reconcileOne(t, r, "wl")
	_, ok := boostOf(t, c, "wl")
	assert.False(t, ok, "a trainer importing torch is not a deaf one")
}
