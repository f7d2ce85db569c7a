package rescheduler

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The figure for docs/rescheduler.md: how long after a node's grace ends
// its pod is deleted. Reported, not asserted (beyond "not before the grace").
func TestNodeLostToDeletionLatency(t *testing.T) {
	const samples = 5
	ns := namespace(t)
	var latencies []time.Duration
	for i := range samples {
		node := readyNode(t, ns, fmt.Sprintf("n%d", i))
		pod := workerOf(t, pytorchJob(t, ns, fmt.Sprintf("job-%d", i), nil)).onNode(node).create(t)
		running(t, pod)
		latencies = append(latencies, measureNodeLost(t, node, pod))
		// The kubelet is gone: confirm the delete, as the force delete after
		// --grace-over-time would, so the lost node carries no managed pod
		// and the zone brake (3 unhealthy carriers) stays off for the next.
		confirmDeletion(t, pod)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	t.Logf("node NotReady past grace (%s) -> pod deletion, %d pods: median %s (min %s, max %s; all %v)",
		testNodeLostGrace, samples, latencies[samples/2].Round(time.Millisecond),
		latencies[0].Round(time.Millisecond), latencies[samples-1].Round(time.Millisecond), latencies)
}

// measureNodeLost flips the node NotReady and returns the time from the end
// of its grace to the moment the pod's deletion is seen (by a watch).
func measureNodeLost(t *testing.T, node string, pod *corev1.Pod) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	w, err := env.c.Watch(ctx, &corev1.PodList{}, client.InNamespace(pod.Namespace), client.MatchingFields{"metadata.name": pod.Name})
	require.NoError(t, err)
	defer w.Stop()

	since := time.Now().Truncate(time.Second) // lastTransitionTime has second precision
	setNodeReady(t, node, corev1.ConditionFalse, since)
	graceEnd := since.Add(testNodeLostGrace)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			require.True(t, ok, "watch closed before pod %s was deleted", pod.Name)
			seen := time.Now()
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || p.UID != pod.UID {
				continue
			}
			if ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
				require.False(t, seen.Before(graceEnd), "pod %s deleted %s before the grace ended", pod.Name, graceEnd.Sub(seen))
				return seen.Sub(graceEnd)
			}
		case <-ctx.Done():
			require.FailNow(t, "pod not deleted", "pod %s not deleted within %s", pod.Name, waitFor)
		}
	}
}
