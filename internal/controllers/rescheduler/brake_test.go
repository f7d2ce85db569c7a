package rescheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"strings"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

func TestTokenBucketAdmitsNodesNotPods(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	opts := testOptions()
	opts.NodeEvictionRate, opts.NodeEvictionBurst = ptr.To(float64(0.1)), 2
	b := newBrakes(opts, brakeInputs{clock: clk, metrics: newMetrics()})

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

	opts.NodeEvictionRate = ptr.To(float64(0))
	stopped := newBrakes(opts, brakeInputs{clock: clk, metrics: newMetrics()})
	assert.NotNil(t, stopped.take("a"), "rate 0 stops all action")
}

func TestZoneBrake(t *testing.T) {
	zoned := func(name string, status corev1.ConditionStatus) *corev1.Node {
		n := newNode(name, status, time.Hour)
		n.Labels = map[string]string{corev1.LabelTopologyZone: "z1"}
		return n
	}
	for _, tc := range []struct {
		unhealthy, healthy, idle, outsiders, pinned int
		engaged                                     bool
	}{
		{unhealthy: 6, healthy: 4, engaged: true},
		{unhealthy: 5, healthy: 5, engaged: false},           // 50% is not more than 55%
		{unhealthy: 2, healthy: 0, engaged: false},           // fewer than 3: a normal failure
		{unhealthy: 3, healthy: 0, idle: 10, engaged: true},  // idle nodes carry no managed pod: not counted
		{unhealthy: 3, healthy: 10, idle: 0, engaged: false}, // 3 of 13
		// Healthy nodes whose only "managed" pods are in a namespace that
		// never opted in (the label is anyone's to set) do not dilute it.
		{unhealthy: 3, outsiders: 10, engaged: true},
		// A tenant's Pending pods pinned (spec.nodeName) to nodes under
		// repair never ran there: they do not engage a brake that would
		// hold every other tenant's recoveries in the zone.
		{unhealthy: 1, healthy: 1, pinned: 6, engaged: false},
		{unhealthy: 0, healthy: 0, pinned: 3, engaged: false},
	} {
		t.Run(fmt.Sprintf("%d-%d-%d-%d-%d", tc.unhealthy, tc.healthy, tc.idle, tc.outsiders, tc.pinned), func(t *testing.T) {
			var objs []any
			i := 0
			add := func(n int, status corev1.ConditionStatus, podNS string, opts ...podOpt) {
				for range n {
					name := fmt.Sprintf("n%d", i)
					i++
					objs = append(objs, zoned(name, status))
					if podNS != "" {
						objs = append(objs, newPod(append([]podOpt{func(p *corev1.Pod) {
							p.Namespace, p.Name, p.UID, p.Spec.NodeName = podNS, "p-"+name, types.UID("uid-"+name), name
						}}, opts...)...))
					}
				}
			}
			add(tc.unhealthy, corev1.ConditionUnknown, "team")
			add(tc.healthy, corev1.ConditionTrue, "team")
			add(tc.idle, corev1.ConditionUnknown, "")
			add(tc.outsiders, corev1.ConditionTrue, "outsider")
			add(tc.pinned, corev1.ConditionUnknown, "team", neverStarted)
			objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "outsider"}})
			h := newHarness(t, false, clientObjects(objs)...)
			h.r.brakes.clusterThreshold = 1 // the zone brake alone (TestClusterBrake has the other)
			hold := h.r.brakes.check(context.Background(), onNode("n0"), zoned("n0", corev1.ConditionUnknown), Decision{Cause: ReasonNodeLost})
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

// neverStarted makes a pod one that is bound to its node but never ran
// there: Pending, no start time (a pod a tenant pinned with spec.nodeName
// to a node whose kubelet is down).
func neverStarted(p *corev1.Pod) { p.Status = corev1.PodStatus{Phase: corev1.PodPending} }

// onNode is a managed pod on node.
func onNode(node string) *corev1.Pod {
	return newPod(func(p *corev1.Pod) { p.Spec.NodeName = node })
}

// renewedLease is node's Lease as the kubelet renewed it at renewed.
func renewedLease(node string, renewed time.Time) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: node},
		Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
}

// TestClusterBrake (issue 31, item 3): 3 zones of 2 nodes whose Leases the
// cache has not seen renewed for 41 s while every Node still says Ready.
// The zone brake needs 3 unhealthy carriers per zone and never engaged;
// the cluster brake holds when more than half of all carriers (or of all
// Leases) look dead, and lets one really lost node of six through.
func TestClusterBrake(t *testing.T) {
	for _, tc := range []struct {
		name    string
		silent  int
		engaged bool
		// othersRenewedAt: when, after the first Leases' last renewal, the
		// others renewed last (0: just now, at the judgement).
		othersRenewedAt time.Duration
	}{
		{"all six silent: a stale view, not six dead kubelets", 6, true, 0},
		{"four of six", 4, true, 0},
		{"three of six: half is not more than half", 3, false, 0},
		{"one of six: a lost node", 1, false, 0},
		// Every Lease stops at once, but their deadlines are spread over a
		// renewal interval: when the first passes --lease-lost-after the
		// others have missed renewals too. Counting only Leases past the
		// bound let the first nodes through (issue 34's stall at 200
		// nodes: 30 pods evicted before the brake engaged).
		{"a stall's onset: one past the bound, five silent 35 s", 1, true, 6 * time.Second},
		{"one past the bound, five silent 15 s: a lost node among healthy ones", 1, false, 26 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := sixNodesInThreeZones(t)
			h.r.opts.LeaseLostAfter.Duration = 40 * time.Second // the figures above are a 40 s bound's
			h.r.brakes.lostAfter = h.r.opts.LeaseLostAfter.Duration
			renewAt := tc.othersRenewedAt
			if renewAt == 0 {
				renewAt = 41 * time.Second
			}
			h.clock.Step(renewAt)
			for i := tc.silent; i < 6; i++ {
				h.r.leases.observe(renewedLease(fmt.Sprintf("n%d", i), t0.Add(renewAt)), h.r.opts.LeaseLostAfter.Duration)
			}
			h.clock.Step(41*time.Second - renewAt)
			node := &corev1.Node{}
			require.NoError(t, h.c.Get(context.Background(), client.ObjectKey{Name: "n0"}, node))
			hold := h.r.brakes.check(context.Background(), onNode("n0"), node, Decision{Cause: ReasonNodeLost})
			engaged := testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues(clusterZone))
			if tc.engaged {
				require.NotNil(t, hold)
				assert.Equal(t, ReasonPartitionSuspected, hold.reason)
				assert.Contains(t, hold.message, "--unhealthy-cluster-threshold")
				assert.Equal(t, 1.0, engaged)
				return
			}
			assert.Zero(t, engaged)
			if hold != nil {
				assert.NotEqual(t, ReasonPartitionSuspected, hold.reason, "%s", hold.message)
			}
		})
	}
}

// TestLiveLeaseReadHoldsAStaleView: the cache shows the node's kubelet
// silent past --lease-lost-after, the API server has its Lease renewed:
// nothing is acted on, and the cache's view is refreshed. A Lease the API
// server confirms silent lets the action through.
func TestLiveLeaseReadHoldsAStaleView(t *testing.T) {
	h := newHarness(t, false, readyNode(), renewedLease("n1", t0.Add(40*time.Second)))
	h.r.leases.observe(renewedLease("n1", t0), h.r.opts.LeaseLostAfter.Duration)
	h.clock.Step(41 * time.Second)
	hold := h.r.brakes.check(context.Background(), onNode("n1"), readyNode(), Decision{Cause: ReasonNodeLost})
	require.NotNil(t, hold, "the cache missed a renewal: hold")
	assert.Equal(t, ReasonLeaseViewStale, hold.reason)
	assert.Contains(t, hold.message, "stale")
	silent, _ := h.r.leases.silentFor("n1")
	assert.Zero(t, silent, "the live renewal counts as seen now")

	confirmed := newHarness(t, false, readyNode(), renewedLease("n1", t0))
	confirmed.r.leases.observe(renewedLease("n1", t0), confirmed.r.opts.LeaseLostAfter.Duration)
	confirmed.clock.Step(41 * time.Second)
	assert.Nil(t, confirmed.r.brakes.check(context.Background(), onNode("n1"), readyNode(), Decision{Cause: ReasonNodeLost}),
		"the API server confirms the silence: the action proceeds")
}

// TestRetriesDoNotDrainTheNodeBucket (issue 31, item 10): one tenant's 30
// jobs exit 137 on 30 nodes; another tenant's pod sits on a really lost
// node. Before the fix every retry took a token of the cluster-wide node
// bucket (burst 3, one node every 10 s) and the lost node's pod waited
// with NodeRateLimited; now retries take their namespace's bucket.
func TestRetriesDoNotDrainTheNodeBucket(t *testing.T) {
	greedy := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "greedy", Annotations: map[string]string{contract.AnnotationInject: contract.InjectEnabled}}}
	objs := []client.Object{greedy, newPod(func(p *corev1.Pod) { p.Name = "victim-worker-0" }), lostNode()}
	for i := range 30 {
		node := fmt.Sprintf("g%d", i)
		objs = append(objs, newNode(node, corev1.ConditionTrue, time.Hour), newPod(exited(137, ""), func(p *corev1.Pod) {
			p.Namespace, p.Name, p.UID, p.Spec.NodeName = "greedy", fmt.Sprintf("cheap%d-worker-0", i), types.UID(fmt.Sprintf("cheap-%d", i)), node
			p.Labels[kubeflowv1.LabelJobName] = fmt.Sprintf("cheap%d", i)
			p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = fmt.Sprintf("cheap%d", i), types.UID(fmt.Sprintf("job-cheap-%d", i))
		}))
	}
	h := newHarness(t, false, objs...)
	for i := range 30 {
		h.reconcile(t, "greedy", fmt.Sprintf("cheap%d-worker-0", i))
	}
	assert.Equal(t, 30, h.removals(), "every retry within its namespace's burst is carried out")
	h.drainEvents()
	h.reconcile(t, "team", "victim-worker-0")
	events := strings.Join(h.drainEvents(), "\n")
	assert.NotContains(t, events, ReasonNodeRateLimited, "the lost node does not wait for another tenant's retries")
	assert.Equal(t, 31, h.removals(), "the lost node's pod is acted on")
}

func TestRetryBucketIsPerNamespace(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	opts := testOptions()
	opts.RetryEvictionRate, opts.RetryEvictionBurst = ptr.To(float64(1)), 2
	b := newBrakes(opts, brakeInputs{clock: clk, metrics: newMetrics()})
	assert.Nil(t, b.takeRetry("a"))
	assert.Nil(t, b.takeRetry("a"))
	h := b.takeRetry("a")
	require.NotNil(t, h, "a's burst is used up")
	assert.Equal(t, ReasonNamespaceRateLimited, h.reason)
	assert.Equal(t, time.Second, h.after)
	assert.Nil(t, b.takeRetry("b"), "b has its own bucket")
	assert.Nil(t, b.take("n1"), "and the node bucket is untouched")
	clk.Step(time.Second)
	assert.Nil(t, b.takeRetry("a"))

	opts.RetryEvictionRate = ptr.To(float64(0))
	assert.NotNil(t, newBrakes(opts, brakeInputs{clock: clk, metrics: newMetrics()}).takeRetry("a"), "rate 0 stops exit retries")
}

// TestBrakeReleaseRestartsSilence: a stall ends, most Leases are renewed
// again and the cluster brake releases; the nodes not renewed yet must not
// be acted on for the silence the brake covered (issue 34: 40 pods of 4
// nodes evicted and force-deleted the moment a 200-node stall ended).
func TestBrakeReleaseRestartsSilence(t *testing.T) {
	h := sixNodesInThreeZones(t)
	h.clock.Step(60 * time.Second)
	node := &corev1.Node{}
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKey{Name: "n0"}, node))
	hold := h.r.brakes.check(context.Background(), onNode("n0"), node, Decision{Cause: ReasonNodeLost})
	require.NotNil(t, hold, "all six silent: the cluster brake holds")
	for i := 2; i < 6; i++ { // four come back; n0 and n1 not yet
		h.r.leases.observe(renewedLease(fmt.Sprintf("n%d", i), t0.Add(60*time.Second)), h.r.opts.LeaseLostAfter.Duration)
	}
	h.clock.Step(2 * time.Second) // past the cached cluster state
	hold = h.r.brakes.check(context.Background(), onNode("n0"), node, Decision{Cause: ReasonNodeLost})
	assert.Zero(t, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues(clusterZone)), "two of six silent: released")
	require.NotNil(t, hold, "the pod decided on the stall's silence looks again")
	silent, known := h.r.leases.silentFor("n0")
	require.True(t, known)
	assert.Less(t, silent, h.r.opts.LeaseLostAfter.Duration, "n0's silence restarts when the brake releases")
}

// TestStaleReleaseKeepsANewIncidentsSilence (issue 34's smoke run): the
// cluster brake held a stall; every Lease came back, but no pod needed an
// action, so nothing judged the brake released. Two nodes then die. The
// first look at their pods releases the brake; it must not restart the
// new silence it never covered (it did: every node counted as renewed, and
// the dead nodes' pods waited a --lease-lost-after more).
func TestStaleReleaseKeepsANewIncidentsSilence(t *testing.T) {
	h := sixNodesInThreeZones(t)
	lost := h.r.opts.LeaseLostAfter.Duration
	h.clock.Step(60 * time.Second)
	require.NotNil(t, h.judgeLost(t, "n0"), "all six silent: the cluster brake holds")
	h.clock.Step(time.Second)
	renewAll(h, 0, 6)                  // the stall ends
	h.clock.Step(lost/2 + time.Second) // n0 and n1 die now
	renewAll(h, 2, 6)
	h.clock.Step(lost/2 + time.Second)
	renewAll(h, 2, 6)
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues(clusterZone)), "nothing judged it since")

	hold := h.judgeLost(t, "n0")
	assert.Zero(t, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues(clusterZone)), "two of six: released")
	silent, _ := h.r.leases.silentFor("n0")
	assert.GreaterOrEqual(t, silent, lost, "n0 went silent after the brake was last engaged: its silence stands")
	assert.Nil(t, hold, "a lost node of a healthy cluster is acted on")
}

// TestLeaderReleasesTheBrakeOfAHealthyCluster: the leader's look at the
// Leases judges an engaged brake again without a pod to judge: released
// once the nodes are back (the gauge says so), and the nodes still silent
// then, whose silence it covered, count as renewed.
func TestLeaderReleasesTheBrakeOfAHealthyCluster(t *testing.T) {
	h := sixNodesInThreeZones(t)
	h.clock.Step(60 * time.Second)
	require.NotNil(t, h.judgeLost(t, "n0"), "all six silent: the cluster brake holds")
	h.clock.Step(2 * time.Second)
	h.r.brakes.release(context.Background())
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues(clusterZone)), "still six silent")

	renewAll(h, 1, 6) // n0 not yet
	h.clock.Step(2 * time.Second)
	h.r.brakes.release(context.Background())
	assert.Zero(t, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues(clusterZone)), "five of six back: released")
	silent, _ := h.r.leases.silentFor("n0")
	assert.Less(t, silent, h.r.opts.LeaseLostAfter.Duration, "n0's silence, covered by the brake, restarts")
	assert.Nil(t, h.r.brakes.check(context.Background(), onNode("n1"), h.node(t, "n1"), Decision{Cause: ReasonNodeLost}),
		"already released: a later look holds nothing for it")
}

// judgeLost asks the brakes about node's pod as if node were lost.
func (h *harness) judgeLost(t *testing.T, node string) *hold {
	t.Helper()
	return h.r.brakes.check(context.Background(), onNode(node), h.node(t, node), Decision{Cause: ReasonNodeLost})
}

func (h *harness) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKey{Name: name}, n))
	return n
}

// renewAll has nodes n<from>..n<to-1> renew their Leases now.
func renewAll(h *harness, from, to int) {
	for i := from; i < to; i++ {
		h.r.leases.observe(renewedLease(fmt.Sprintf("n%d", i), h.clock.Now()), h.r.opts.LeaseLostAfter.Duration)
	}
}

// sixNodesInThreeZones: one managed pod on each of six nodes, two per zone,
// every Lease seen renewed at t0.
func sixNodesInThreeZones(t *testing.T) *harness {
	t.Helper()
	var objs []client.Object
	for i := range 6 {
		n := newNode(fmt.Sprintf("n%d", i), corev1.ConditionTrue, time.Hour)
		n.Labels = map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("z%d", i/2)}
		objs = append(objs, n, newPod(func(p *corev1.Pod) {
			p.Name, p.UID, p.Spec.NodeName = "p-"+n.Name, types.UID("uid-"+n.Name), n.Name
		}))
	}
	h := newHarness(t, false, objs...)
	for i := range 6 {
		h.r.leases.observe(renewedLease(fmt.Sprintf("n%d", i), t0), h.r.opts.LeaseLostAfter.Duration)
	}
	return h
}

// TestHoldIsSaidOnce (issue 34): a held pod is looked at again every
// brakeRecheck; its Event is written once per hold, not once per look (an
// API write per held pod every 30 s while a brake holds a zone or the
// cluster), and again when the reason changes, after heldRepeat, after
// the pod's action went ahead, and for every EvictionBlocked retry.
func TestHoldIsSaidOnce(t *testing.T) {
	var n heldNotes
	a, b := types.UID("a"), types.UID("b")
	assert.True(t, n.first(a, ReasonPartitionSuspected, t0))
	assert.False(t, n.first(a, ReasonPartitionSuspected, t0.Add(brakeRecheck)), "a recheck is not news")
	assert.True(t, n.first(b, ReasonPartitionSuspected, t0.Add(brakeRecheck)), "another pod's hold is")
	assert.True(t, n.first(a, ReasonNodeRateLimited, t0.Add(2*brakeRecheck)), "a new reason is news")
	assert.False(t, n.first(a, ReasonNodeRateLimited, t0.Add(heldRepeat)))
	assert.True(t, n.first(a, ReasonNodeRateLimited, t0.Add(2*brakeRecheck+heldRepeat)), "said again after heldRepeat")
	n.forget(b)
	assert.True(t, n.first(b, ReasonPartitionSuspected, t0.Add(heldRepeat)), "a hold after the action went ahead is news")
	assert.True(t, n.first(a, ReasonEvictionBlocked, t0))
	assert.True(t, n.first(a, ReasonEvictionBlocked, t0), "every refused eviction is reported")
	// bounded: notes older than heldRepeat go at the next prune
	n.first(types.UID("c"), ReasonPartitionSuspected, t0.Add(3*heldRepeat))
	assert.Len(t, n.notes, 1)
}

// TestHeldPodGetsOneEvent: the Reconciler's hold path writes the Event of
// a pod held by a brake once over its rechecks, and the log stays.
func TestHeldPodGetsOneEvent(t *testing.T) {
	h := newHarness(t, false)
	pod := onNode("n0")
	hold := &hold{reason: ReasonPartitionSuspected, after: brakeRecheck, message: "suspected partition"}
	d := Decision{Cause: ReasonNodeLost, Action: ActionEvict, Message: "node lost"}
	for range 3 {
		res := h.r.holdBack(context.Background(), pod, jobs.Key{}, d, hold)
		assert.Equal(t, brakeRecheck, res.RequeueAfter, "every recheck still happens")
		h.clock.Step(brakeRecheck)
	}
	evs := h.drainEvents()
	require.Len(t, evs, 1, "%v", evs)
	assert.Contains(t, evs[0], ReasonPartitionSuspected)
	assert.Equal(t, 3.0, testutil.ToFloat64(h.r.metrics.held.WithLabelValues(ReasonPartitionSuspected)), "the metric counts every hold")
}

// TestBrakedZoneNeedsNoJobRead (issue 34): a pod on a lost node of a zone
// whose brake is engaged is held before its job's policy is read (an API
// read per pod: ~5,000 when a zone of 500 nodes goes silent at 5,000
// nodes, which held the decisions back by minutes); a lost node outside
// any brake still reads it.
func TestBrakedZoneNeedsNoJobRead(t *testing.T) {
	for _, braked := range []bool{true, false} {
		t.Run(fmt.Sprint("braked=", braked), func(t *testing.T) {
			h := newHarness(t, true, lostZone()...)
			h.r.brakes.clusterThreshold = 1 // the zone brake alone
			if !braked {
				h.r.brakes.threshold = 1
			}
			h.reconcile(t, "team", "p-n0")
			evs := h.drainEvents()
			if braked {
				require.Len(t, evs, 1, "%v", evs)
				assert.Contains(t, evs[0], ReasonPartitionSuspected)
				assert.Zero(t, h.jobReads, "held by the zone brake: the job's policy is not read")
				assert.Empty(t, h.evictions)
				return
			}
			assert.NotZero(t, h.jobReads, "a pod that is acted on reads its job's policy: %v", evs)
		})
	}
}

// TestNewHoldAfterRecoveryIsSaid: a brake that held a pod, released when
// its zone came back and engaged again says so again: a new incident is
// news (make scale's smoke run: a stall, then a zone outage 2 minutes
// later, and the outage's holds were never said). While the brake stays
// engaged, a pod whose node came back and failed again is one of the pods
// its Event already counts.
func TestNewHoldAfterRecoveryIsSaid(t *testing.T) {
	h := newHarness(t, true, lostZone()...)
	h.r.brakes.clusterThreshold = 1 // the zone brake alone
	setReady := func(status corev1.ConditionStatus, nodes ...string) {
		t.Helper()
		for _, name := range nodes {
			n := &corev1.Node{}
			require.NoError(t, h.c.Get(context.Background(), client.ObjectKey{Name: name}, n))
			n.Status.Conditions[0].Status = status
			require.NoError(t, h.c.Status().Update(context.Background(), n))
		}
		h.clock.Step(2 * areaStateTTL)
	}
	all := []string{"n0", "n1", "n2", "n3"}
	h.reconcile(t, "team", "p-n0")
	h.clock.Step(brakeRecheck)
	h.reconcile(t, "team", "p-n0")
	require.Len(t, h.drainEvents(), 1, "one Event for one hold")

	setReady(corev1.ConditionTrue, "n0")
	h.reconcile(t, "team", "p-n0")
	assert.Empty(t, h.drainEvents(), "its node is back: nothing to say")
	setReady(corev1.ConditionUnknown, "n0")
	h.reconcile(t, "team", "p-n0")
	assert.Empty(t, h.drainEvents(), "the brake held the zone all along, and its Event said so")

	setReady(corev1.ConditionTrue, all...)
	h.r.brakes.release(context.Background())
	require.Zero(t, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues("z1")), "the zone is back: released")
	h.reconcile(t, "team", "p-n0")
	assert.Empty(t, h.drainEvents())

	setReady(corev1.ConditionUnknown, all...)
	h.reconcile(t, "team", "p-n0")
	evs := h.drainEvents()
	require.Len(t, evs, 1, "the new engagement's hold is said: %v", evs)
	assert.Contains(t, evs[0], ReasonPartitionSuspected)
}

// TestBrakeHoldsManyPodsWithOneEvent: 50 pods on the lost nodes of one
// engaged brake get one Event, the brake's, not one each (8,734 Events in
// a 55 s stall at 1,000 nodes, written while the control plane is the
// suspect); it is written again, counting them, at most once per
// brakeEventEvery while the count grows. Every hold is still counted in
// the metric and nothing is evicted.
func TestBrakeHoldsManyPodsWithOneEvent(t *testing.T) {
	for _, brake := range []string{"zone", "cluster"} {
		t.Run(brake, func(t *testing.T) {
			var objs []client.Object
			var names []string
			for i := range 5 {
				n := newNode(fmt.Sprintf("n%d", i), corev1.ConditionUnknown, time.Hour)
				n.Labels = map[string]string{corev1.LabelTopologyZone: "z1"}
				objs = append(objs, n)
				for j := range 10 {
					name := fmt.Sprintf("p-%s-%d", n.Name, j)
					names = append(names, name)
					objs = append(objs, newPod(func(p *corev1.Pod) {
						p.Name, p.UID, p.Spec.NodeName = name, types.UID("uid-"+name), n.Name
					}))
				}
			}
			h := newHarness(t, true, objs...)
			if brake == "zone" {
				h.r.brakes.clusterThreshold = 1
			} else {
				h.r.brakes.threshold = 1
			}
			round := func() []string {
				t.Helper()
				for _, name := range names {
					h.reconcile(t, "team", name)
				}
				return h.drainEvents()
			}

			evs := round()
			require.Len(t, evs, 1, "one Event for the brake, not one per held pod: %v", evs)
			assert.Contains(t, evs[0], ReasonPartitionSuspected)
			assert.Contains(t, evs[0], "1 pod held by this brake so far")

			h.clock.Step(brakeRecheck)
			assert.Empty(t, round(), "looked at again within brakeEventEvery: nothing new said")

			h.clock.Step(brakeEventEvery)
			evs = round()
			require.Len(t, evs, 1, "%v", evs)
			assert.Contains(t, evs[0], "50 pods held by this brake so far", "the count of the pods it holds")

			h.clock.Step(brakeEventEvery)
			assert.Empty(t, round(), "the same 50 pods: nothing new to say")

			assert.Equal(t, 200.0, testutil.ToFloat64(h.r.metrics.held.WithLabelValues(ReasonPartitionSuspected)), "the metric counts every hold")
			assert.Empty(t, h.evictions)
			assert.Empty(t, h.deletes)
		})
	}
}

// TestBrakeNoteSaysWhatIsNews: a brake's Event is written on its first
// hold, again only after brakeEventEvery and when it holds more pods, or
// after heldRepeat whatever the count; its engagement or release starts
// afresh.
func TestBrakeNoteSaysWhatIsNews(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	b := newBrakes(testOptions(), brakeInputs{clock: clk, metrics: newMetrics()})
	a, c := types.UID("a"), types.UID("c")

	n, ok := b.noteHeld("z1", a)
	assert.True(t, ok, "the first hold")
	assert.Equal(t, 1, n)
	_, ok = b.noteHeld("z1", c)
	assert.False(t, ok, "a second pod within brakeEventEvery")
	n, ok = b.noteHeld("z2", a)
	assert.True(t, ok, "another brake's is its own")
	assert.Equal(t, 1, n)
	clk.Step(brakeEventEvery)
	n, ok = b.noteHeld("z1", a)
	assert.True(t, ok, "more pods held than last said")
	assert.Equal(t, 2, n)
	clk.Step(brakeEventEvery)
	_, ok = b.noteHeld("z1", c)
	assert.False(t, ok, "the same two pods")
	clk.Step(heldRepeat - brakeEventEvery)
	n, ok = b.noteHeld("z1", c)
	assert.True(t, ok, "said again heldRepeat after it was last said")
	assert.Equal(t, 2, n)
	clk.Step(heldRepeat)
	n, ok = b.noteHeld("z1", c)
	assert.True(t, ok, "no hold for heldRepeat: a new episode")
	assert.Equal(t, 1, n)
	assert.Len(t, b.said, 1, "z2's note, without a hold for heldRepeat, is gone")

	b.setEngaged("z1", true, 3)
	n, ok = b.noteHeld("z1", a)
	assert.True(t, ok, "engaged: news")
	assert.Equal(t, 1, n)
	b.setEngaged("z1", true, 3)
	_, ok = b.noteHeld("z1", c)
	assert.False(t, ok, "still engaged: not news")
	b.setEngaged("z1", false, 0)
	_, ok = b.noteHeld("z1", a)
	assert.True(t, ok, "released: news")
}

// lostZone is zone z1's 4 nodes, each Unknown for an hour, each with a
// managed pod p-<node>: more than the zone brake's share is lost.
func lostZone() []client.Object {
	var objs []client.Object
	for i := range 4 {
		n := newNode(fmt.Sprintf("n%d", i), corev1.ConditionUnknown, time.Hour)
		n.Labels = map[string]string{corev1.LabelTopologyZone: "z1"}
		objs = append(objs, n, newPod(func(p *corev1.Pod) {
			p.Name, p.UID, p.Spec.NodeName = "p-"+n.Name, types.UID("uid-"+n.Name), n.Name
		}))
	}
	return objs
}

// TestCarrierIndex: the brakes' carrier index, on client-go's own indexer
// as the pod informer keeps it, lists each (namespace, node) with a managed
// pod once, leaves out pods on no node, pods that opted out and pods that
// never ran on their node, and drops a pair when its last pod goes.
func TestCarrierIndex(t *testing.T) {
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{IndexCarrier: carrierKey})
	pod := func(ns, name, node string, opts ...podOpt) *corev1.Pod {
		return newPod(append([]podOpt{func(p *corev1.Pod) { p.Namespace, p.Name, p.Spec.NodeName = ns, name, node }}, opts...)...)
	}
	a1, a2, b1 := pod("a", "a1", "n1"), pod("a", "a2", "n1"), pod("b", "b1", "n2")
	for _, p := range []*corev1.Pod{a1, a2, b1,
		pod("a", "pending", ""),
		pod("a", "out", "n3", func(p *corev1.Pod) {
			p.Annotations = map[string]string{contract.AnnotationInject: contract.InjectDisabled}
		}),
		pod("a", "unlabelled", "n4", func(p *corev1.Pod) { delete(p.Labels, contract.LabelManaged) }),
		pod("a", "pinned", "n5", neverStarted),
	} {
		require.NoError(t, idx.Add(p))
	}
	keys := indexedCarrierKeys(idx)
	got, err := keys(context.Background())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"a/n1", "b/n2"}, got)

	require.NoError(t, idx.Delete(b1))
	require.NoError(t, idx.Delete(a1))
	got, _ = keys(context.Background())
	assert.Equal(t, []string{"a/n1"}, got, "n2 carries nothing now; n1 still carries a2")
}

// TestOneCountForEveryZone (issue 34): the cluster brake and every zone's
// brake are judged from one count of the carriers per areaStateTTL; a
// count per zone and one for the cluster, each listing its nodes' pods,
// copied every cached pod about twice a second at 5,000 nodes.
func TestOneCountForEveryZone(t *testing.T) {
	objs := lostZone()
	for i := range 4 {
		n := newNode(fmt.Sprintf("m%d", i), corev1.ConditionUnknown, time.Hour)
		n.Labels = map[string]string{corev1.LabelTopologyZone: "z2"}
		objs = append(objs, n, newPod(func(p *corev1.Pod) {
			p.Name, p.UID, p.Spec.NodeName = "p-"+n.Name, types.UID("uid-"+n.Name), n.Name
		}))
	}
	h := newHarness(t, false, objs...)
	h.r.brakes.clusterThreshold = 1 // the zone brakes alone
	counts := 0
	list := h.r.brakes.carrierKeys
	h.r.brakes.carrierKeys = func(ctx context.Context) ([]string, error) { counts++; return list(ctx) }
	judge := func(node string) {
		t.Helper()
		n := &corev1.Node{}
		require.NoError(t, h.c.Get(context.Background(), client.ObjectKey{Name: node}, n))
		hold := h.r.brakes.check(context.Background(), onNode(node), n, Decision{Cause: ReasonNodeLost})
		require.NotNil(t, hold, node)
		assert.Equal(t, ReasonPartitionSuspected, hold.reason)
	}
	judge("n0")
	judge("m0")
	judge("n1")
	assert.Equal(t, 1, counts, "both zones and the cluster judged from one count")
	for _, z := range []string{"z1", "z2"} {
		assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.brakeEngaged.WithLabelValues(z)), z)
		assert.Equal(t, 4.0, testutil.ToFloat64(h.r.metrics.unhealthyNodes.WithLabelValues(z)), z)
	}
	h.clock.Step(areaStateTTL)
	judge("m1")
	assert.Equal(t, 2, counts, "counted again once the count is areaStateTTL old")
}

// TestAreaJudgedOncePerReconcile: a pod's zone and cluster brakes are
// judged once per reconcile, whether before its job's policy is read (a
// lost node) or with the other brakes (a retried exit). The job's read
// takes areaStateTTL, so a second judgement would count again.
func TestAreaJudgedOncePerReconcile(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
	}{
		{"lost node", newPod(), lostNode()},
		{"retried exit", newPod(exited(137, "Error")), readyNode()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, true, tc.pod, tc.node, pytorchJob())
			counts := 0
			list := h.r.brakes.carrierKeys
			h.r.brakes.carrierKeys = func(ctx context.Context) ([]string, error) { counts++; return list(ctx) }
			h.onJobRead = func() { h.clock.Step(areaStateTTL) }
			h.reconcile(t, "team", "job-worker-0")
			assert.Equal(t, 1, h.removals(), "acted on: %v", h.drainEvents())
			assert.Equal(t, 1, counts, "the area brakes judged once")
		})
	}
}
