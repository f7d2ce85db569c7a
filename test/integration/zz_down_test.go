package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/test/controlplane"
)

// TestTrainguardDown shows what the shipped failure policies do while
// trainguard is unreachable: opted-in namespaces fail closed, every other
// namespace is never sent to trainguard and keeps working.
func TestTrainguardDown(t *testing.T) {
	ctx := context.Background()
	optedIn := namespace(t, true, nil)
	other := namespace(t, false, nil)
	require.NoError(t, env.tg.Stop())
	env.tg = nil
	t.Cleanup(func() {
		tg, err := env.cp.StartTrainguard(ctx, controlplane.TrainguardOptions{ProbeAddr: env.probes, MetricsAddr: env.metrics})
		require.NoError(t, err)
		env.tg = tg
	})

	err := env.c.Create(ctx, newPod(optedIn, "blocked").Obj())
	require.Error(t, err, "an opted-in namespace fails closed: no pod runs without its checkpoint hook")
	assert.Contains(t, err.Error(), "pods.mutate.trainguard.io")
	t.Logf("opted-in namespace while trainguard is down: %v", err)

	err = env.c.Create(ctx, job(t, optedIn, "blocked", masterWorkerSpec))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pytorchjobs.mutate.trainguard.io")

	p := newPod(other, "free").Obj()
	require.NoError(t, env.c.Create(ctx, p), "a namespace that has not opted in must never be blocked by trainguard")
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(p), p))
	assert.Empty(t, p.Spec.InitContainers)
	require.NoError(t, env.c.Create(ctx, job(t, other, "free", masterWorkerSpec)))
}

// TestNamespaceOptedInWhileTrainguardDown: the namespace webhook fails open,
// so an annotation set while trainguard is down lands without the label the
// selectors need; the mirror reconciler adds it once trainguard is back.
func TestNamespaceOptedInWhileTrainguardDown(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, false, nil)
	require.NoError(t, env.tg.Stop())
	env.tg = nil
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			tg, err := env.cp.StartTrainguard(ctx, controlplane.TrainguardOptions{ProbeAddr: env.probes, MetricsAddr: env.metrics})
			require.NoError(t, err)
			env.tg = tg
		}
	})

	var obj corev1.Namespace
	require.NoError(t, env.c.Get(ctx, client.ObjectKey{Name: ns}, &obj))
	obj.Annotations = map[string]string{contract.AnnotationInject: contract.InjectEnabled}
	require.NoError(t, env.c.Update(ctx, &obj), "the namespace webhook must never block namespace changes")
	require.NotContains(t, obj.Labels, contract.LabelInjectEnabled, "nobody mirrored the label while trainguard was down")

	tg, err := env.cp.StartTrainguard(ctx, controlplane.TrainguardOptions{ProbeAddr: env.probes, MetricsAddr: env.metrics})
	require.NoError(t, err)
	env.tg, restarted = tg, true
	require.Eventually(t, func() bool {
		if err := env.c.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
			return false
		}
		return obj.Labels[contract.LabelInjectEnabled] == contract.InjectEnabled
	}, 10*time.Second, 100*time.Millisecond, "the reconciler mirrors the annotation once trainguard is back")
	p := newPod(ns, "after-restart").Obj()
	require.NoError(t, env.c.Create(ctx, p))
	assert.NotEmpty(t, p.Annotations[contract.AnnotationInjected])
}

// TestUpdatesGoThroughWhileTrainguardDown: updates never wedge. With
// trainguard unreachable, a pod in an opted-in namespace can lose its
// finalizer (or it would hang in Terminating) and gain a label, a job can
// lose its finalizer, and even a trainguard annotation change goes through
// (fail open); creating a training pod there is still refused, naming
// trainguard.
func TestUpdatesGoThroughWhileTrainguardDown(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	p := newPod(ns, "finalized").Obj()
	p.Finalizers = []string{"example.com/hold"}
	require.NoError(t, env.c.Create(ctx, p))
	require.NotEmpty(t, p.Annotations[contract.AnnotationInjected], "created while trainguard was up, so injected")
	j := job(t, ns, "finalized", masterWorkerSpec)
	j.SetFinalizers([]string{"example.com/hold"})
	require.NoError(t, env.c.Create(ctx, j))

	require.NoError(t, env.tg.Stop())
	env.tg = nil
	t.Cleanup(func() {
		tg, err := env.cp.StartTrainguard(ctx, controlplane.TrainguardOptions{ProbeAddr: env.probes, MetricsAddr: env.metrics})
		require.NoError(t, err)
		env.tg = tg
	})

	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(p), p))
	p.Labels["team"] = "vision"
	require.NoError(t, env.c.Update(ctx, p), "labelling a pod must not need trainguard")
	p.Annotations[contract.AnnotationTaskD] = contract.InjectDisabled
	require.NoError(t, env.c.Update(ctx, p), "a pod UPDATE that trainguard would check fails open while it is down")

	require.NoError(t, env.c.Delete(ctx, p))
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(p), p))
	require.NotNil(t, p.DeletionTimestamp, "the pod is Terminating, held by its finalizer")
	p.Finalizers = nil
	require.NoError(t, env.c.Update(ctx, p), "removing a finalizer must not need trainguard, or the pod hangs in Terminating")
	err := env.c.Get(ctx, client.ObjectKeyFromObject(p), p)
	assert.True(t, apierrors.IsNotFound(err), "the pod is gone once its finalizer is removed, got %v", err)

	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(j), j))
	j.SetFinalizers(nil)
	j.SetLabels(map[string]string{"team": "vision"})
	require.NoError(t, env.c.Update(ctx, j), "a job's metadata update must not need trainguard")

	err = env.c.Create(ctx, newPod(ns, "refused").Obj())
	require.Error(t, err, "creation still fails closed: no training pod starts without its checkpoint hook")
	assert.Contains(t, err.Error(), "trainguard.io")
	t.Logf("pod creation while trainguard is down: %v", err)
}
