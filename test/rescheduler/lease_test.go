package rescheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
)

// A node whose kubelet stops renewing its Lease is lost after
// --lease-lost-after while its Ready condition still says True (the node
// lifecycle controller has not noticed yet), and its pod is force-deleted
// at --force-delete-after without waiting --grace-over-time: no kubelet is
// there to carry out a graceful delete. A kubelet that renews late but
// within the lease duration, and a cordoned node, lose nothing.
func TestSilentKubeletIsActedOnAheadOfNotReady(t *testing.T) {
	env.replaceShared(t)
	o := defaultOptions()
	o.LeaseLostAfter.Duration, o.ForceDeleteAfter.Duration = 4*time.Second, 4*time.Second
	env.startManagerForTest(t, managerOptions{Rescheduler: o})

	ns := namespace(t)
	dead, slow, cordoned := readyNode(t, ns, "dead"), readyNode(t, ns, "slow"), readyNode(t, ns, "cordoned")
	cordon(t, cordoned)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	renewLease(t, dead)
	go renewEvery(ctx, t, slow, 3*time.Second) // late, within the 4 s lease
	go renewEvery(ctx, t, cordoned, time.Second)

	lost := workerOf(t, pytorchJob(t, ns, "silent", nil)).onNode(dead).create(t)
	running(t, lost)
	slowPod := workerOf(t, pytorchJob(t, ns, "slow", nil)).onNode(slow).create(t)
	running(t, slowPod)
	cordonedPod := workerOf(t, pytorchJob(t, ns, "cordoned", nil)).onNode(cordoned).create(t)
	running(t, cordonedPod)

	e := waitEvent(t, lost, resched.ReasonForceDelete)
	assert.Contains(t, e.Note, "kubelet silent, Lease not renewed")
	assert.Contains(t, e.Note, "the kubelet cannot carry out the graceful delete")
	waitGone(t, lost)
	assert.Contains(t, record(t, lost).nodes, dead, "the replacement avoids the silent node")
	node := &corev1.Node{}
	require.NoError(t, env.c.Get(context.Background(), client.ObjectKey{Name: dead}, node))
	assert.Equal(t, corev1.ConditionTrue, node.Status.Conditions[0].Status, "acted on before any NotReady")

	time.Sleep(2 * o.LeaseLostAfter.Duration) // long enough for a wrong decision about the others
	assertUntouched(t, slowPod)
	assertUntouched(t, cordonedPod)
}

// renewLease creates or renews the node's Lease as its kubelet does.
func renewLease(t *testing.T, node string) {
	t.Helper()
	require.NoError(t, renew(context.Background(), node))
}

func renew(ctx context.Context, node string) error {
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{}
	err := env.c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, lease)
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	if err != nil {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node}}
		lease.Spec.HolderIdentity, lease.Spec.RenewTime = &node, &now
		return env.c.Create(ctx, lease)
	}
	lease.Spec.RenewTime = &now
	return env.c.Update(ctx, lease)
}

func renewEvery(ctx context.Context, t *testing.T, node string, every time.Duration) {
	for {
		if err := renew(ctx, node); err != nil && ctx.Err() == nil {
			t.Errorf("renewing the Lease of %s: %v", node, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
