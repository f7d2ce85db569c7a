package rescheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainguard/trainguard/internal/policy"
)

// Storm brakes, after the node lifecycle controller (NLC): a token bucket on
// the nodes lost (--node-eviction-rate), a bucket per namespace on the pods
// retried for their exit (--retry-eviction-rate), a per-zone brake that
// stops all action in a zone where too many nodes carrying managed pods are
// unhealthy at once (--unhealthy-zone-threshold): a suspected partition of
// the control plane from the nodes, not a hardware failure; and a
// cluster-wide brake (--unhealthy-cluster-threshold) for when a large share
// of all carrier nodes, or of all node Leases, look dead at once: that is
// the control plane's problem, or trainguard's own view gone stale, and
// small zones never reach the zone brake's minimum of 3 (TestClusterBrake:
// 3 zones of 2 nodes, no Lease update seen for 41 s, all 6 healthy pods
// were evicted and 4 force-deleted before it).
//
// judgeArea (brake_judge.go) says whether the zone and cluster brakes are
// engaged; the brakes type counts the carriers it judges from (carrier.go:
// which nodes carry managed pods, from the pod informer's index), records and
// exports what it says, restarts the silence a released brake covered,
// keeps the buckets and reads a lost node's Lease live.

// brakeSilence is how long a Lease must be silent to count against the
// zone and cluster brakes: half of --lease-lost-after, two missed renewals
// of a kubelet renewing every quarter of it. Silence that starts at once
// (a stall, a partition) passes the bound over a whole renewal interval,
// node after node; counting only Leases past the bound admitted the first
// nodes before the share reached the threshold (make scale's stall at 200
// nodes: 30 pods evicted). At half the bound, every Lease that stopped with
// the first one already counts when the first is acted on. Counting more
// can only hold more: the brakes never act.
func brakeSilence(lostAfter time.Duration) time.Duration { return lostAfter / 2 }

// admittedFor is how long a node, once it took a token, stays admitted: its
// other pods are acted on without a new token.
const admittedFor = 10 * time.Minute

// areaStateTTL bounds how often the zones' and the cluster's health is
// recounted (it walks every node and the carrier index).
const areaStateTTL = time.Second

// brakeInputs are what the brakes read and write besides their own state,
// given once at construction.
type brakeInputs struct {
	// cache reads the nodes; apiReader a lost node's Lease, live.
	cache, apiReader client.Reader
	// leases is the reconciler's view of the kubelets' silence: the brakes
	// count it, confirm it and restart it.
	leases *leases
	// carrierKeys lists IndexCarrier's values: which nodes carry managed
	// pods of which namespaces.
	carrierKeys func(context.Context) ([]string, error)
	// scope is the webhook's opt-in, asked of each carrier's namespace.
	scope   policy.Scope
	metrics *metrics
	clock   clock.PassiveClock
	// lostAfter is --lease-lost-after.
	lostAfter time.Duration
}

// brakes are the storm brakes' state and what acts on judgeArea's verdict.
// Every worker of the reconciler asks them; mu guards the state.
type brakes struct {
	brakeInputs
	limits

	mu       sync.Mutex
	limiter  *rate.Limiter
	stopped  bool // --node-eviction-rate=0
	admitted map[string]time.Time
	// engaged is every engaged brake (clusterZone for the cluster's) and
	// when it was last judged engaged.
	engaged map[string]time.Time
	// said is, per brake, the pods it held and what its Event said
	// (noteHeld).
	said map[string]*brakeNote
	// area is the last count of carriers (areaState); countMu lets one
	// worker make it at a time.
	area    area
	countMu sync.Mutex
	// retries are the per-namespace buckets on pods retried for their
	// exit, apart from the node bucket: one tenant's cheap jobs exiting 137
	// must not use up the budget another tenant's pod on a really lost
	// node needs (TestRetriesDoNotDrainTheNodeBucket).
	retries      map[string]*rate.Limiter
	retryRate    rate.Limit
	retryBurst   int
	retryStopped bool // --retry-eviction-rate=0
}

func newBrakes(opts Options, in brakeInputs) *brakes {
	return &brakes{
		brakeInputs: in,
		limits:      limits{threshold: opts.UnhealthyZoneThreshold, clusterThreshold: opts.UnhealthyClusterThreshold},
		limiter:     rate.NewLimiter(rate.Limit(*opts.NodeEvictionRate), opts.NodeEvictionBurst),
		stopped:     *opts.NodeEvictionRate == 0,
		admitted:    map[string]time.Time{},
		engaged:     map[string]time.Time{},
		said:        map[string]*brakeNote{},

		retries:      map[string]*rate.Limiter{},
		retryRate:    rate.Limit(*opts.RetryEvictionRate),
		retryBurst:   opts.RetryEvictionBurst,
		retryStopped: *opts.RetryEvictionRate == 0,
	}
}

// check says whether pod, decided d, may be evicted or deleted now; a nil
// hold means yes. node is nil when the Node object is gone (it has no zone
// to judge). The area brakes first (areaHold), then admit.
func (b *brakes) check(ctx context.Context, pod *corev1.Pod, node *corev1.Node, d Decision) *hold {
	if h := b.areaHold(ctx, node); h != nil {
		return h
	}
	return b.admit(ctx, pod, d)
}

// admit is check past the area brakes: a lost node takes a token of the
// node bucket, after a live read of its Lease confirmed the silence the
// cache showed; any other cause (a retryable exit) takes one of its
// namespace's bucket.
func (b *brakes) admit(ctx context.Context, pod *corev1.Pod, d Decision) *hold {
	if d.Cause != ReasonNodeLost {
		return b.takeRetry(pod.Namespace)
	}
	if h := b.confirmSilence(ctx, pod.Spec.NodeName); h != nil {
		return h
	}
	return b.take(pod.Spec.NodeName)
}

// areaHold judges the cluster brake and node's zone brake: a hold while
// either is engaged (or was just released, to restart the silence it
// covered), nil otherwise. It takes no token and reads only the cache, so
// Reconcile asks it before the job's policy (an API read) for a pod on a
// lost node: a brake holds every pod of a zone whatever its job's policy,
// and a zone of 500 nodes is thousands of pods.
func (b *brakes) areaHold(ctx context.Context, node *corev1.Node) *hold {
	a, err := b.areaState(ctx)
	if err != nil {
		return &hold{reason: ReasonPartitionSuspected, message: "cannot judge the cluster's and zones' health: " + err.Error(), after: brakeRecheck,
			brake: clusterZone}
	}
	scope := []string{clusterZone}
	if node != nil {
		scope = append(scope, zoneOf(node))
	}
	h, ts := judgeArea(a, scope, b.engagedBrakes(), b.limits)
	for _, t := range ts {
		if held := b.record(ctx, t, node); held != nil {
			return held
		}
	}
	return h
}

// release judges every engaged brake again from the cache and releases
// the ones whose cluster or zone is healthy: the leader calls it with each
// look at the Leases. Judged only when a held pod looked again, a brake
// stayed engaged after its nodes recovered (nothing needs an action on
// healthy nodes): trainguard_rescheduler_brake_engaged said 1 for a cluster
// long healthy, and the release came with the next incident, whose nodes'
// silence it then restarted (make scale's smoke run: a zone outage after a
// stall was decided 20 s late and its zone brake not yet engaged when
// looked at).
func (b *brakes) release(ctx context.Context) {
	engaged := b.engagedBrakes()
	if len(engaged) == 0 {
		return
	}
	a, err := b.areaState(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "judging the engaged brakes; they stay engaged until a held pod looks again")
		return
	}
	for brake := range engaged { // one at a time: judgeArea stops at a brake that holds
		_, ts := judgeArea(a, []string{brake}, engaged, b.limits)
		for _, t := range ts {
			b.record(ctx, t, nil)
		}
	}
}

// record keeps and exports a brake's state as judged, logs a change once
// and, when the brake released, restarts the silence it covered; the
// hold is for the pod on node whose silence restarted (restartSilence).
func (b *brakes) record(ctx context.Context, t transition, node *corev1.Node) *hold {
	if b.setEngaged(t.brake, t.on, t.unhealthy) {
		switch {
		case t.on && t.brake == clusterZone:
			log.FromContext(ctx).Info("rescheduler cluster brake engaged: so many nodes at once look dead that the control plane or trainguard's own view "+
				"is the likelier fault; nothing is evicted or deleted", "why", t.why)
		case t.brake == clusterZone:
			log.FromContext(ctx).Info("rescheduler cluster brake released", "why", t.why)
		case t.on:
			log.FromContext(ctx).Info("rescheduler brake engaged: suspected partition, nothing in the zone is evicted or deleted", "zone", t.brake, "why", t.why)
		default:
			log.FromContext(ctx).Info("rescheduler brake released", "zone", t.brake, "why", t.why)
		}
	}
	if !t.released() {
		return nil
	}
	return b.restartSilence(ctx, t.brake, t.lastEngaged, node)
}

// takeRetry admits one pod of namespace against its namespace's bucket.
func (b *brakes) takeRetry(namespace string) *hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.retryStopped {
		return &hold{reason: ReasonNamespaceRateLimited, after: brakeRecheck, message: "--retry-eviction-rate=0: no pod is retried for its exit"}
	}
	l, ok := b.retries[namespace]
	if !ok {
		l = rate.NewLimiter(b.retryRate, b.retryBurst)
		b.retries[namespace] = l
	}
	now := b.clock.Now()
	res := l.ReserveN(now, 1)
	if d := res.DelayFrom(now); res.OK() && d == 0 {
		b.pruneRetries(now)
		return nil
	}
	d := res.DelayFrom(now)
	res.CancelAt(now)
	return &hold{reason: ReasonNamespaceRateLimited, after: d,
		message: fmt.Sprintf("--retry-eviction-rate=%g pods/s (burst %d) used up in namespace %s; retried in %s (a lost node's pods do not wait for it)",
			float64(b.retryRate), b.retryBurst, namespace, d.Round(time.Millisecond))}
}

// pruneRetries drops the buckets that are full again: they hold nothing a
// new bucket would not. Bounded memory however many namespaces retried.
// Called with mu held.
func (b *brakes) pruneRetries(now time.Time) {
	if len(b.retries) < 64 {
		return
	}
	for ns, l := range b.retries {
		if l.TokensAt(now) >= float64(b.retryBurst) {
			delete(b.retries, ns)
		}
	}
}

// confirmSilence reads the node's Lease from the API server before a lost
// node is acted on. The decision read the cache, and a cache whose watch
// stalled shows every kubelet silent while all of them renew: a renewal
// the cache missed holds the action (and refreshes the cache's view).
// Nodes judged by their Ready condition alone, or whose Lease is gone,
// need no read.
func (b *brakes) confirmSilence(ctx context.Context, node string) *hold {
	seen, known := b.leases.lastRenew(node)
	if !known || seen.silent < b.lostAfter {
		return nil
	}
	live := &coordinationv1.Lease{}
	err := b.apiReader.Get(ctx, client.ObjectKey{Namespace: NodeLeaseNamespace, Name: node}, live)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return &hold{reason: ReasonLeaseViewStale, after: brakeRecheck,
			message: fmt.Sprintf("cannot read node %s's Lease from the API server to confirm its kubelet is silent: %v", node, err)}
	}
	var renew metav1.MicroTime
	if live.Spec.RenewTime != nil {
		renew = *live.Spec.RenewTime
	}
	if renew.Equal(&seen.renew) {
		return nil
	}
	b.leases.renewed(node, renew)
	log.FromContext(ctx).Info("cached node Lease view is stale: the kubelet renewed, nothing is acted on", "node", node,
		"cachedRenewTime", seen.renew.Time, "liveRenewTime", renew.Time, "cachedSilence", seen.silent)
	return &hold{reason: ReasonLeaseViewStale, after: brakeRecheck,
		message: fmt.Sprintf("node %s looked silent for %s in trainguard's cache, but the API server has its Lease renewed at %s: "+
			"the cached view is stale (a stalled watch), not the kubelet; nothing is evicted or deleted",
			node, seen.silent.Round(time.Second), renew.UTC().Format(time.RFC3339))}
}

// restartSilence runs when a brake releases: like the node lifecycle
// controller leaving full disruption, every node in scope whose silence the
// brake covered (seen renewed last before covered, when the brake was last
// judged engaged) counts as renewed now. The Leases of a stall or a
// partition come back one after another over a renewal interval; the brake
// releases once most are back, and the rest, silent past every bound, were
// evicted and force-deleted at once (TestBrakeReleaseRestartsSilence: 40
// pods of 4 nodes when a 200-node stall ended). A node that really died meanwhile is lost
// a --lease-lost-after later. A node that went silent after the brake was
// last engaged is a new incident and keeps its silence. zone is the
// brake's (clusterZone: every node). If the pod being judged (on node; nil
// when none is) was decided on a silence restarted here, it looks again:
// the hold; otherwise nil.
func (b *brakes) restartSilence(ctx context.Context, zone string, covered time.Time, node *corev1.Node) *hold {
	what, inScope := fmt.Sprintf("zone %q's brake", zone), func(n *corev1.Node) bool { return zoneOf(n) == zone }
	if zone == clusterZone {
		what, inScope = "the cluster brake", func(*corev1.Node) bool { return true }
	}
	var nodes corev1.NodeList
	if err := b.cache.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return &hold{reason: ReasonPartitionSuspected, message: "cannot list the nodes after " + what + " released: " + err.Error(), after: brakeRecheck,
			brake: zone}
	}
	names := map[string]bool{}
	for i := range nodes.Items {
		if inScope(&nodes.Items[i]) {
			names[nodes.Items[i].Name] = true
		}
	}
	restarted := b.leases.restart(names, covered)
	log.FromContext(ctx).Info("brake released: the silence it covered restarts", "brake", what, "nodesRestarted", len(restarted),
		"coveredUntil", covered)
	if node == nil || !restarted[node.Name] {
		return nil
	}
	return &hold{reason: ReasonPartitionSuspected, after: brakeRecheck, brake: zone,
		message: what + " just released: every node it held counts as renewed now and is judged afresh"}
}

// engagedBrakes is every engaged brake (clusterZone for the cluster's)
// and when it was last judged engaged.
func (b *brakes) engagedBrakes() map[string]time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]time.Time, len(b.engaged))
	for brake, at := range b.engaged {
		out[brake] = at
	}
	return out
}

// setEngaged records a brake's state and exports it; changed says it flipped.
func (b *brakes) setEngaged(zone string, on bool, unhealthy int) (changed bool) {
	b.mu.Lock()
	_, was := b.engaged[zone]
	changed = was != on
	if on {
		b.engaged[zone] = b.clock.Now()
	} else {
		delete(b.engaged, zone)
	}
	if changed {
		delete(b.said, zone) // a new engagement, or the release, is news
	}
	b.mu.Unlock()
	b.metrics.brakeEngaged.WithLabelValues(zone).Set(boolGauge(on))
	b.metrics.unhealthyNodes.WithLabelValues(zone).Set(float64(unhealthy))
	return changed
}

// brakeNote is what one brake's Event said while it holds.
type brakeNote struct {
	held     map[types.UID]struct{} // the pods it held since it engaged
	last     time.Time              // its last hold
	said     time.Time              // its last Event (zero: none yet)
	saidHeld int                    // how many pods that Event counted
}

// brakeEventEvery: while a brake holds, its Event is written again at
// most this often, when it holds more pods than it last said.
const brakeEventEvery = time.Minute

// noteHeld notes pod held by brake, and says how many pods the brake has
// held since it engaged and whether its Event is to be written now: on
// its first hold, then at most once per brakeEventEvery while the count
// grows, and after heldRepeat in any case (the API server drops Events
// after an hour). A brake holds every pod of a zone, or of the cluster,
// while the control plane is the suspect: an Event per held pod was
// 8,734 Events in a 55 s stall at 1,000 nodes (about 50,000 at 5,000),
// all written to that control plane. Bounded: a note per brake, reset
// when the brake engages or releases, or after heldRepeat without a
// hold.
func (b *brakes) noteHeld(brake string, pod types.UID) (held int, say bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for z, n := range b.said { // a few zones: a note with no hold for heldRepeat is a past episode
		if now.Sub(n.last) >= heldRepeat {
			delete(b.said, z)
		}
	}
	n := b.said[brake]
	if n == nil {
		n = &brakeNote{held: map[types.UID]struct{}{}}
		b.said[brake] = n
	}
	n.last = now
	n.held[pod] = struct{}{}
	held = len(n.held)
	switch {
	case n.said.IsZero(), now.Sub(n.said) >= heldRepeat:
	case now.Sub(n.said) >= brakeEventEvery && held != n.saidHeld:
	default:
		return held, false
	}
	n.said, n.saidHeld = now, held
	return held, true
}

// take admits node against the token bucket.
func (b *brakes) take(node string) *hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for n, until := range b.admitted {
		if !now.Before(until) {
			delete(b.admitted, n)
		}
	}
	if _, ok := b.admitted[node]; ok {
		return nil
	}
	if b.stopped {
		return &hold{reason: ReasonNodeRateLimited, after: brakeRecheck, message: "--node-eviction-rate=0: no node is acted on"}
	}
	res := b.limiter.ReserveN(now, 1)
	if d := res.DelayFrom(now); res.OK() && d == 0 {
		b.admitted[node] = now.Add(admittedFor)
		b.metrics.nodesActedOn.Inc()
		return nil
	}
	// Not now: give the token back and say when one will be there.
	d := res.DelayFrom(now)
	res.CancelAt(now)
	return &hold{reason: ReasonNodeRateLimited, after: d,
		message: fmt.Sprintf("--node-eviction-rate=%g nodes/s (burst %d) used up; node %s waits %s for its turn",
			float64(b.limiter.Limit()), b.limiter.Burst(), node, d.Round(time.Millisecond))}
}

// areaState is the latest count, made again when older than areaStateTTL.
// One worker counts; the others wait for its count rather than make their
// own. At 5,000 nodes a count per zone and one for the cluster, each
// listing the pods of every node in scope, copied every managed pod of the
// cache about twice a second (make scale at 5,000 nodes: 1.3 GCs a second,
// the heap at GOMEMLIMIT); one pass over an index of pod keys copies no pod.
func (b *brakes) areaState(ctx context.Context) (area, error) {
	b.countMu.Lock()
	defer b.countMu.Unlock()
	b.mu.Lock()
	a := b.area
	b.mu.Unlock()
	if !a.at.IsZero() && b.clock.Now().Sub(a.at) < areaStateTTL {
		return a, nil
	}
	a, err := b.countArea(ctx)
	if err != nil {
		return area{}, err
	}
	b.mu.Lock()
	b.area = a
	b.mu.Unlock()
	return a, nil
}

// countArea counts, per zone and cluster-wide, the nodes that carry
// managed pods and how many of them are unhealthy: Ready not True, or the
// kubelet silent for brakeSilence.
func (b *brakes) countArea(ctx context.Context) (area, error) {
	carriers, err := b.carrierNodes(ctx)
	if err != nil {
		return area{}, err
	}
	var nodes corev1.NodeList
	if err := b.cache.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return area{}, fmt.Errorf("listing nodes: %w", err)
	}
	silence := brakeSilence(b.lostAfter)
	a := area{at: b.clock.Now(), zones: map[string]zoneState{}}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if !carriers[n.Name] {
			continue
		}
		silent, known := b.leases.silentFor(n.Name)
		unhealthy := readyStatus(n) != corev1.ConditionTrue || (known && silent >= silence)
		zone := zoneOf(n)
		z := a.zones[zone]
		z.carrier++
		a.cluster.carrier++
		if unhealthy {
			z.unhealthy++
			a.cluster.unhealthy++
		}
		a.zones[zone] = z
	}
	a.cluster.silentLeases, a.cluster.leases = b.leases.silentCount(silence)
	return a, nil
}

// zoneOf is the node's zone, as NLC reads it; "" for nodes without one
// (they form one zone together).
func zoneOf(n *corev1.Node) string {
	if z, ok := n.Labels[corev1.LabelTopologyZone]; ok {
		return z
	}
	return n.Labels[corev1.LabelFailureDomainBetaZone]
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
