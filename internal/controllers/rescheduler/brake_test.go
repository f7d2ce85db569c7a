package rescheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestTokenBucketAdmitsNodesNotPods(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	opts := testOptions()
	opts.NodeEvictionRate, opts.NodeEvictionBurst = 0.1, 2
	b := newBrakes(opts, clk, newMetrics())

	assert.Nil(t, b.take("a"))
	assert.Nil(t, b.take("a"), "an admitted node's other pods need no new token")
	assert.Nil(t, b.take("b"))
	h := b.take("c")
	require.NotNil(t, h, "the burst is used up")
	assert.Equal(t, ReasonNodeRateLimited, h.reason)
	assert.Equal(t, 10*time.Second, h.after, "one node every 10 s")
	clk.Step(10 * time.Second)
	assert.Nil(t, b.take("c"))
	assert.Equal(t, 3.0, testutil.ToFloat64(b.metrics.nodesActedOn))

	opts.NodeEvictionRate = 0
	stopped := newBrakes(opts, clk, newMetrics())
	assert.NotNil(t, stopped.take("a"), "rate 0 stops all action")
}

func TestZoneBrake(t *testing.T) {
	zoned := func(name string, status corev1.ConditionStatus) *corev1.Node {
		n := newNode(name, status, time.Hour)
		n.Labels = map[string]string{corev1.LabelTopologyZone: "z1"}
		return n
	}
	for _, tc := range []struct {
		unhealthy, healthy, idle, outsiders int
		engaged                             bool
	}{
		{unhealthy: 6, healthy: 4, engaged: true},
		{unhealthy: 5, healthy: 5, engaged: false},           // 50% is not more than 55%
		{unhealthy: 2, healthy: 0, engaged: false},           // fewer than 3: a normal failure
		{unhealthy: 3, healthy: 0, idle: 10, engaged: true},  // idle nodes carry no managed pod: not counted
		{unhealthy: 3, healthy: 10, idle: 0, engaged: false}, // 3 of 13
		// Healthy nodes whose only "managed" pods are in a namespace that
		// never opted in (the label is anyone's to set) do not dilute it.
		{unhealthy: 3, outsiders: 10, engaged: true},
	} {
		t.Run(fmt.Sprintf("%d-%d-%d-%d", tc.unhealthy, tc.healthy, tc.idle, tc.outsiders), func(t *testing.T) {
			var objs []any
			i := 0
			add := func(n int, status corev1.ConditionStatus, podNS string) {
				for range n {
					name := fmt.Sprintf("n%d", i)
					i++
					objs = append(objs, zoned(name, status))
					if podNS != "" {
						objs = append(objs, newPod(func(p *corev1.Pod) {
							p.Namespace, p.Name, p.UID, p.Spec.NodeName = podNS, "p-"+name, types.UID("uid-"+name), name
						}))
					}
				}
			}
			add(tc.unhealthy, corev1.ConditionUnknown, "team")
			add(tc.healthy, corev1.ConditionTrue, "team")
			add(tc.idle, corev1.ConditionUnknown, "")
			add(tc.outsiders, corev1.ConditionTrue, "outsider")
			objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "outsider"}})
			h := newHarness(t, false, clientObjects(objs)...)
			hold := h.r.checkBrakes(context.Background(), "n0", zoned("n0", corev1.ConditionUnknown))
			if tc.engaged {
				require.NotNil(t, hold)
				assert.Equal(t, ReasonPartitionSuspected, hold.reason)
				assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues("z1")))
			} else {
				assert.Nil(t, hold)
				assert.Zero(t, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues("z1")))
			}
		})
	}
}

func clientObjects(objs []any) []client.Object {
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(client.Object))
	}
	return out
}
