package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/contract"
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
