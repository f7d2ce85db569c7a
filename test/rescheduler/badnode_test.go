package rescheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// The long form's stranding: a 2-worker job on two nodes; a Lease lapse
// (here NotReady past the grace) moves the worker off node b, which is
// recorded; b heals; a drain cordons a, the job's last other node. The
// record must not keep the job off b: the replacements are admitted with a
// preferred avoidance only, so the scheduler can place them on b. A pod
// that then fails on b again (created after the record) makes the
// avoidance of b required for the pods after it.
func TestBadNodeRecordNeverStrandsTheJob(t *testing.T) {
	ns := namespace(t)
	a, b := readyNode(t, ns, "a"), readyNode(t, ns, "b")
	job := pytorchJob(t, ns, "two", nil)
	w0 := worker(t, job, 0).onNode(a).create(t)
	w1 := worker(t, job, 1).onNode(b).create(t)
	running(t, w0)
	running(t, w1)

	setNodeReady(t, b, corev1.ConditionFalse, time.Now().Truncate(time.Second))
	waitTerminating(t, w1)
	rec := record(t, w1)
	require.NotNil(t, rec)
	require.Contains(t, rec.nodes, b, "the lost node is recorded for the job")
	confirmDeletion(t, w1)

	// The node heals and the drain of the other one begins. The operator's
	// replacement comes a second after the record at the earliest (it waits
	// for the old pod to go): it is a pod placed after the record.
	setNodeReady(t, b, corev1.ConditionTrue, time.Now())
	cordon(t, a)
	time.Sleep(time.Until(rec.cm.CreationTimestamp.Add(time.Second)))
	replacement := worker(t, job, 1).annotate(contract.AnnotationMindClusterRecoverStrategy, "recover").create(t)
	assert.Equal(t, []string{b}, preferredAvoided(t, replacement), "the replacement prefers other nodes")
	assert.Empty(t, requiredAvoided(t, replacement), "but is not forbidden the healed node")
	assert.Contains(t, replacement.Annotations[contract.AnnotationInjected], contract.InjectionAvoidNodes)
	assert.True(t, schedulable(t, replacement, b), "the job's pod fits the recorded node once it is Ready")
	assert.False(t, schedulable(t, replacement, a), "the cordoned node takes nothing")

	// The drain evicts w0; its replacement too may run on b.
	require.NoError(t, env.c.Delete(context.Background(), w0))
	confirmDeletion(t, w0)
	w0again := worker(t, job, 0).create(t)
	assert.True(t, schedulable(t, w0again, b), "every pod of the job fits the healed node")

	// The scheduler binds the replacement to b, where it fails again: b is
	// now avoided as required.
	require.NoError(t, env.c.SubResource("binding").Create(context.Background(), replacement,
		&corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: b}}))
	replacement = getPod(t, replacement)
	require.Equal(t, b, replacement.Spec.NodeName)
	exited(t, replacement, 137)
	waitDeleted(t, replacement)
	require.Eventually(t, func() bool {
		return !schedulable(t, worker(t, job, 1).dryRun(t), b)
	}, waitFor, tick, "a second failure on b makes its avoidance required")
	again := worker(t, job, 1).create(t)
	assert.Equal(t, []string{b}, requiredAvoided(t, again))
	assert.Empty(t, preferredAvoided(t, again), "required, not both")
	assert.False(t, schedulable(t, again, b))
	assert.Contains(t, record(t, again).cm.Data["strikes"], `"count":2`)
}

// worker is the job's worker i, as kubeflow's operator creates it.
func worker(t *testing.T, job *unstructured.Unstructured, i int) *podBuilder {
	t.Helper()
	b := workerOf(t, job)
	idx := string(rune('0' + i))
	b.pod.Name = job.GetName() + "-worker-" + idx
	b.pod.Labels["training.kubeflow.org/replica-index"] = idx
	return b
}

// dryRun admits the pod without storing it.
func (b *podBuilder) dryRun(t *testing.T) *corev1.Pod {
	t.Helper()
	p := b.obj()
	require.NoError(t, env.c.Create(context.Background(), p, client.DryRunAll))
	return p
}

// schedulable says whether kube-scheduler's filters that concern node
// choice here would let pod onto the named node: the node is Ready and not
// cordoned, and the pod's required node affinity and node selector match
// it (kube-scheduler's own matcher). Preferences only score.
func schedulable(t *testing.T, pod *corev1.Pod, name string) bool {
	t.Helper()
	node := &corev1.Node{}
	require.NoError(t, env.c.Get(context.Background(), client.ObjectKey{Name: name}, node))
	if node.Spec.Unschedulable {
		return false
	}
	ready := false
	for _, c := range node.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		return false
	}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	require.NoError(t, err)
	return ok
}
