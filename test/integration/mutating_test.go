package integration

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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func templateOf(t *testing.T, u *unstructured.Unstructured, replica string) corev1.PodTemplateSpec {
	t.Helper()
	raw, found, err := unstructured.NestedMap(u.Object, "spec", "pytorchReplicaSpecs", replica, "template")
	require.NoError(t, err)
	require.True(t, found, "replica %s has a template", replica)
	var tmpl corev1.PodTemplateSpec
	require.NoError(t, runtimeConvert(raw, &tmpl))
	return tmpl
}

// assertInjected checks every injection on a pod template or, with pod, a pod
// (a template carries torchrun's restart env, a pod also the restart rules
// its restartPolicy needs).
func assertInjected(t *testing.T, meta map[string]string, labels map[string]string, spec corev1.PodSpec, pod bool) {
	t.Helper()
	assert.Equal(t, "prestop,taskd,recover-strategy,restart-rules", meta[contract.AnnotationInjected], "a CPU job gets no GPU default")
	assert.Contains(t, spec.Containers[0].Env, corev1.EnvVar{Name: "PET_MAX_RESTARTS", Value: "10"}, "torchrun restarts its workers in place")
	if pod {
		for _, code := range contract.ProcessFaultExitCodes() {
			assert.True(t, contract.RestartsInPlace(&spec, spec.Containers[0].Name, code), "exit %d restarts in place", code)
		}
	}
	assert.Equal(t, "recover-in-place,recover", meta["recover-strategy"])
	assert.Equal(t, "grace", labels["fault-scheduling"])
	assert.Equal(t, "true", labels[contract.LabelManaged])
	c := spec.Containers[0]
	require.NotNil(t, c.Lifecycle, "preStop hook")
	assert.Equal(t, []string{"/opt/trainguard/bin/trainguard-agent", "prestop", "--timeout=60s"}, c.Lifecycle.PreStop.Exec.Command)
	require.Len(t, spec.InitContainers, 1)
	assert.Equal(t, "trainguard-agent-install", spec.InitContainers[0].Name)
	assert.Contains(t, c.Ports, corev1.ContainerPort{Name: "taskd-port", ContainerPort: 9601, Protocol: corev1.ProtocolTCP})
	assert.NotContains(t, c.Resources.Limits, corev1.ResourceName("nvidia.com/gpu"), "a CPU job gets no GPU default")
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	assert.Equal(t, int64(90), *spec.TerminationGracePeriodSeconds)
}

func TestPyTorchJobInOptedInNamespaceIsInjected(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	j := job(t, ns, "mnist", masterWorkerSpec)
	require.NoError(t, env.c.Create(ctx, j))
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(j.GroupVersionKind())
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(j), got))
	for _, replica := range []string{"Master", "Worker"} {
		tmpl := templateOf(t, got, replica)
		assertInjected(t, tmpl.Annotations, tmpl.Labels, tmpl.Spec, false)
	}
	assert.Equal(t, "recover-in-place,recover", got.GetAnnotations()["recover-strategy"])
	assert.Equal(t, "grace", got.GetLabels()["fault-scheduling"])
}

func TestNamespaceNotOptedInIsUnchanged(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, false, nil)
	j := job(t, ns, "mnist", masterWorkerSpec)
	require.NoError(t, env.c.Create(ctx, j))
	tmpl := templateOf(t, j, "Worker")
	assert.Empty(t, tmpl.Annotations)
	assert.Nil(t, tmpl.Spec.Containers[0].Lifecycle)
	p := newPod(ns, "p").Obj()
	require.NoError(t, env.c.Create(ctx, p))
	assert.Empty(t, p.Annotations)
	assert.Empty(t, p.Spec.InitContainers)
}

func TestOptOutAnnotationIsUnchanged(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	j := job(t, ns, "hands-off", masterWorkerSpec)
	j.SetAnnotations(map[string]string{contract.AnnotationInject: contract.InjectDisabled})
	require.NoError(t, env.c.Create(ctx, j))
	tmpl := templateOf(t, j, "Master")
	assert.Nil(t, tmpl.Spec.Containers[0].Lifecycle)
	assert.NotContains(t, j.GetAnnotations(), contract.AnnotationInjected)
	p := newPod(ns, "p").WithAnnotation(contract.AnnotationInject, contract.InjectDisabled).Obj()
	require.NoError(t, env.c.Create(ctx, p))
	assert.Empty(t, p.Spec.InitContainers)
}

func TestNamespaceAnnotatedAfterCreation(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, false, nil)
	var nsObj corev1.Namespace
	require.NoError(t, env.c.Get(ctx, client.ObjectKey{Name: ns}, &nsObj))
	nsObj.Annotations = map[string]string{contract.AnnotationInject: contract.InjectEnabled}
	require.NoError(t, env.c.Update(ctx, &nsObj))
	annotated := time.Now()
	var injectedAfter time.Duration
	require.Eventually(t, func() bool {
		p := newPod(ns, "probe-"+strings.ToLower(time.Now().Format("150405.000000000"))).Obj()
		p.Name = strings.ReplaceAll(p.Name, ".", "-")
		if err := env.c.Create(ctx, p); err != nil {
			return false
		}
		injectedAfter = time.Since(annotated)
		return p.Annotations[contract.AnnotationInjected] != ""
	}, 5*time.Second, 100*time.Millisecond, "objects created after the opt-in must be injected within 5s")
	t.Logf("injected %s after the namespace was annotated", injectedAfter.Round(time.Millisecond))
	require.NoError(t, env.c.Get(ctx, client.ObjectKey{Name: ns}, &nsObj))
	assert.Equal(t, contract.InjectEnabled, nsObj.Labels[contract.LabelInjectEnabled], "the opt-in label is mirrored")
}

func TestBarePodIsInjected(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	p := newPod(ns, "elastic-worker-0").Obj()
	require.NoError(t, env.c.Create(ctx, p))
	var got corev1.Pod
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(p), &got))
	assertInjected(t, got.Annotations, got.Labels, got.Spec, true)
}

func TestServerSideDryRunReturnsMutatedObjectAndPersistsNothing(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	p := newPod(ns, "dry").Obj()
	require.NoError(t, env.c.Create(ctx, p, client.DryRunAll))
	assertInjected(t, p.Annotations, p.Labels, p.Spec, true)
	err := env.c.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
	assert.True(t, apierrors.IsNotFound(err), "dry run must not persist the pod: %v", err)
}

// TestPodsOfOptedOutJobAreLeftAlone: an opted-out job's pods carry no opt-out
// annotation of their own (the operator builds them from the template), so
// trainguard recognises them by their owner and neither mutates nor refuses
// them, even when they use TaskD's port for something else.
func TestPodsOfOptedOutJobAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	controller := true
	p := newPod(ns, "hands-off-worker-0").Obj()
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "hands-off",
		UID: "0b6f3c2e-0000-4000-8000-000000000001", Controller: &controller}}
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9601}}
	require.NoError(t, env.c.Create(ctx, p), "a pod trainguard does not manage is never refused for TaskD")
	assert.Empty(t, p.Spec.InitContainers)
	assert.NotContains(t, p.Annotations, contract.AnnotationInjected)
}
