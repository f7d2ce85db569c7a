package rescheduler

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// TestInPlaceRestartsStopAtTheJobsCap (issue 28, bounded): a rank that
// crashes on every start under kubeflow's ExitCode (restartPolicy Never,
// trainguard's restart rules) is restarted in place up to the job's cap;
// at the cap the record stops the job's in-place restarts (so the webhook
// gives new pods no rules), the job gets a Warning Event and the cap
// annotation, each pod that restarts only by trainguard's rules is evicted
// once (no bad node), and a replacement's process fault is left to the
// operator. Before, the kubelet restarted the rank in place for ever.
func TestInPlaceRestartsStopAtTheJobsCap(t *testing.T) {
	never := restartPolicy(corev1.RestartPolicyNever)
	worker := newPod(never, rules, crashLooping(139, 0))
	master := newPod(never, rules, terminatedRunning(138, 1), func(p *corev1.Pod) { p.Name, p.UID = "job-master-0", "uid-m" })
	job := pytorchJob()
	job.SetAnnotations(map[string]string{contract.AnnotationMaxReschedules: "1"})
	h := newHarness(t, true, worker, master, readyNode(), job)
	key := keyOf(worker)
	ctx := context.Background()

	// Restart 1/1 in place: nothing removed, nothing recorded yet.
	h.reconcile(t, "team", worker.Name)
	assert.Zero(t, h.removals())
	assert.Regexp(t, `(?m)^Normal RestartInPlace .*restart 1/1`, strings.Join(h.drainEvents(), "\n"))

	// It crashes again after its restart: the cap.
	require.NoError(t, h.c.Get(ctx, client.ObjectKeyFromObject(worker), worker))
	crashLooping(139, 1)(worker)
	require.NoError(t, h.c.Status().Update(ctx, worker))
	h.reconcile(t, "team", worker.Name)

	require.Len(t, h.evictions, 1, "the pod restarting only by trainguard's rules is evicted once")
	_, rec := h.record(t, key)
	assert.True(t, rec.InPlaceStopped)
	assert.Equal(t, 1, rec.InPlaceRestarts)
	assert.Empty(t, rec.Nodes, "a process fault records no bad node")
	assert.Zero(t, rec.Reschedules)
	evs := h.drainEvents()
	capEvents := 0
	for _, e := range evs {
		if strings.HasPrefix(e, "Warning InPlaceRestartCapReached ") {
			capEvents++
		}
	}
	assert.Equal(t, 2, capEvents, "on the job and on the pod: %v", evs)
	assert.Contains(t, strings.Join(evs, "\n"), "(1/1, seen at pod job-worker-0, exit code 139)")
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(pytorchJobGVK)
	require.NoError(t, h.c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "job"}, got))
	assert.Equal(t, "1", got.GetAnnotations()[contract.AnnotationReschedulesExhausted])

	// The webhook's view: the job's new pods get no restart rules.
	stopped, err := newBadNodeStore(h.c, testOptions(), jobs.Builtin(), ownNS, h.clock).InPlaceStopped(ctx, newPod())
	require.NoError(t, err)
	assert.True(t, stopped)

	// The peer, still carrying the rules, stops too (once), without a
	// second job Event.
	h.reconcile(t, "team", master.Name)
	require.Len(t, h.evictions, 2)
	evs = h.drainEvents()
	assert.Len(t, evs, 2, "cause and decision on the pod: %v", evs)

	// The operator's replacement (no rules) fails with a process fault:
	// left to the operator's restart policy, not migrated.
	replacement := newPod(never, exited(139, "Error"), func(p *corev1.Pod) { p.UID = "uid-2" })
	require.NoError(t, h.c.Create(ctx, replacement))
	h.reconcile(t, "team", replacement.Name)
	assert.Len(t, h.evictions, 2, "nothing more evicted")
	_, rec = h.record(t, key)
	assert.Empty(t, rec.Nodes)
	assert.Regexp(t, `Warning InPlaceRestartCapReached .*left to the operator's restart policy`, strings.Join(h.drainEvents(), "\n"))
}

// TestInPlaceCountIsTheJobs: the record keeps the job's highest restart
// count, so a pod that replaces another continues the count.
func TestInPlaceCountIsTheJobs(t *testing.T) {
	pod := newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 4))
	h := newHarness(t, false, pod, readyNode())
	h.reconcile(t, "team", pod.Name)
	_, rec := h.record(t, keyOf(pod))
	assert.Equal(t, 4, rec.InPlaceRestarts)
	assert.False(t, rec.InPlaceStopped)
	assert.Empty(t, rec.Nodes)

	fresh := newPod(restartPolicy(corev1.RestartPolicyOnFailure), crashLooping(137, 0), func(p *corev1.Pod) { p.Name, p.UID = "job-master-0", "uid-m" })
	require.NoError(t, h.c.Create(context.Background(), fresh))
	h.reconcile(t, "team", fresh.Name)
	assert.Regexp(t, `restart 5/10`, strings.Join(h.drainEvents(), "\n"))
}
