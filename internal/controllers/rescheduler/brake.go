package rescheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Storm brakes, after the node lifecycle controller (NLC): a token bucket on
// the nodes acted on (--node-eviction-rate), and a per-zone brake that stops
// all action in a zone where too many nodes carrying managed pods are
// unhealthy at once (--unhealthy-zone-threshold): a suspected partition of
// the control plane from the nodes, not a hardware failure.

// minUnhealthyNodes is NLC's rule: a zone is partially disrupted only with
// more than 2 unhealthy nodes, so one or two failed nodes in a small zone
// are always handled.
const minUnhealthyNodes = 3

// admittedFor is how long a node, once it took a token, stays admitted: its
// other pods are acted on without a new token.
const admittedFor = 10 * time.Minute

// zoneStateTTL bounds how often a zone's health is recomputed (it walks the
// zone's nodes and the pod index).
const zoneStateTTL = time.Second

// brakeRecheck is how soon a held pod looks again: the node lifecycle
// controller's --node-monitor-period.
const brakeRecheck = 5 * time.Second

type brakes struct {
	mu        sync.Mutex
	clock     clock.PassiveClock
	limiter   *rate.Limiter
	stopped   bool // --node-eviction-rate=0
	admitted  map[string]time.Time
	zones     map[string]zoneState
	threshold float64
	engaged   map[string]bool
	metrics   *metrics
}

type zoneState struct {
	at                 time.Time
	unhealthy, carrier int
}

func (z zoneState) fraction() float64 {
	if z.carrier == 0 {
		return 0
	}
	return float64(z.unhealthy) / float64(z.carrier)
}

func newBrakes(opts Options, clk clock.PassiveClock, m *metrics) *brakes {
	return &brakes{
		clock:     clk,
		limiter:   rate.NewLimiter(rate.Limit(opts.NodeEvictionRate), opts.NodeEvictionBurst),
		stopped:   opts.NodeEvictionRate == 0,
		admitted:  map[string]time.Time{},
		zones:     map[string]zoneState{},
		threshold: opts.UnhealthyZoneThreshold,
		engaged:   map[string]bool{},
		metrics:   m,
	}
}

// hold is why an action must wait, and for how long.
type hold struct {
	reason, message string
	after           time.Duration
}

// checkBrakes says whether pods on the node may be evicted or deleted now;
// a nil hold means yes. node is nil when the Node object is gone (it has no
// zone to judge; only the token bucket applies).
func (r *Reconciler) checkBrakes(ctx context.Context, nodeName string, node *corev1.Node) *hold {
	b := r.brakes
	if node != nil {
		zone := zoneOf(node)
		z, err := r.zoneState(ctx, zone)
		if err != nil {
			return &hold{reason: ReasonPartitionSuspected, message: "cannot judge the zone's health: " + err.Error(), after: brakeRecheck}
		}
		if h := b.judgeZone(ctx, zone, z); h != nil {
			return h
		}
	}
	return b.take(nodeName)
}

// judgeZone engages or releases the zone brake and reports the change once.
func (b *brakes) judgeZone(ctx context.Context, zone string, z zoneState) *hold {
	on := z.unhealthy >= minUnhealthyNodes && z.fraction() > b.threshold
	b.mu.Lock()
	changed := b.engaged[zone] != on
	b.engaged[zone] = on
	b.mu.Unlock()
	b.metrics.brakeEngaged.WithLabelValues(zone).Set(boolGauge(on))
	b.metrics.unhealthyNodes.WithLabelValues(zone).Set(float64(z.unhealthy))
	msg := fmt.Sprintf("%d of %d nodes carrying managed pods in zone %q are NotReady/Unknown (%.0f%%, threshold %.0f%%, at least %d)",
		z.unhealthy, z.carrier, zone, 100*z.fraction(), 100*b.threshold, minUnhealthyNodes)
	if changed {
		if on {
			log.FromContext(ctx).Info("rescheduler brake engaged: suspected partition, nothing in the zone is evicted or deleted", "zone", zone, "why", msg)
		} else {
			log.FromContext(ctx).Info("rescheduler brake released", "zone", zone, "why", msg)
		}
	}
	if !on {
		return nil
	}
	return &hold{reason: ReasonPartitionSuspected, after: brakeRecheck,
		message: msg + ": suspected partition (--unhealthy-zone-threshold); no pod in the zone is evicted or deleted until it recovers"}
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

// zoneState counts the zone's nodes that carry managed pods, and how many
// of them are unhealthy (Ready not True). Cached for zoneStateTTL.
func (r *Reconciler) zoneState(ctx context.Context, zone string) (zoneState, error) {
	b := r.brakes
	now := b.clock.Now()
	b.mu.Lock()
	z, ok := b.zones[zone]
	b.mu.Unlock()
	if ok && now.Sub(z.at) < zoneStateTTL {
		return z, nil
	}
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return zoneState{}, fmt.Errorf("listing nodes: %w", err)
	}
	z = zoneState{at: now}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if zoneOf(n) != zone {
			continue
		}
		carries, err := r.carriesManagedPods(ctx, n.Name)
		if err != nil {
			return zoneState{}, err
		}
		if !carries {
			continue
		}
		z.carrier++
		silent, known := r.leases.silentFor(n.Name)
		if readyStatus(n) != corev1.ConditionTrue || (known && silent >= r.opts.LeaseLostAfter) {
			z.unhealthy++
		}
	}
	b.mu.Lock()
	b.zones[zone] = z
	b.mu.Unlock()
	return z, nil
}

// carriesManagedPods says whether a pod trainguard manages runs on node:
// labelled managed and in a namespace that opted in. The label alone is
// anyone's to set: counted as it was, pods of namespaces that never opted
// in, on healthy nodes, diluted the zone's unhealthy fraction and kept the
// brake off during a partition.
func (r *Reconciler) carriesManagedPods(ctx context.Context, node string) (bool, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{IndexPodNodeName: node},
		client.MatchingLabels{contract.LabelManaged: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	for i := range pods.Items {
		ok, _, err := r.injects(ctx, pods.Items[i].Namespace, pods.Items[i].Annotations)
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
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
