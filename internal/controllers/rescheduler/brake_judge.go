package rescheduler

import (
	"fmt"
	"time"
)

// The area brakes' judge: whether the cluster brake and a zone's brake are
// engaged, from one count of the carriers (area), the brakes engaged so far
// and the thresholds. It is pure, like Decide: no clock, no client, no lock,
// no metric; the brakes type (brake.go) counts, records what it says, and
// acts on a release.

// minUnhealthyNodes is NLC's rule: a zone is partially disrupted only with
// more than 2 unhealthy nodes, so one or two failed nodes in a small zone
// are always handled.
const minUnhealthyNodes = 3

// minSilentClusterNodes: the cluster brake needs at least two nodes (or
// Leases) silent, so the loss of the one node of a tiny cluster is handled.
const minSilentClusterNodes = 2

// clusterZone labels the cluster brake in trainguard_rescheduler_brake_engaged;
// parentheses cannot occur in a zone label's value.
const clusterZone = "(cluster)"

// brakeRecheck is how soon a held pod looks again: the node lifecycle
// controller's --node-monitor-period.
const brakeRecheck = 5 * time.Second

// area is one count of the nodes carrying managed pods, and how many of
// them are unhealthy, for the cluster and for every zone at once; the
// cluster's count also has the node Leases seen and how many are silent.
type area struct {
	at      time.Time
	cluster zoneState
	zones   map[string]zoneState
}

type zoneState struct {
	unhealthy, carrier int
	// silentLeases of leases (the cluster brake only).
	silentLeases, leases int
}

func (z zoneState) fraction() float64 { return share(z.unhealthy, z.carrier) }

// share is n of `of` as a fraction; 0 of nothing.
func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// limits are the area brakes' thresholds: a brake engages when more than
// this share of its carriers is unhealthy. 1 (or more) turns a brake off.
type limits struct {
	threshold        float64 // --unhealthy-zone-threshold
	clusterThreshold float64 // --unhealthy-cluster-threshold
}

// hold is why an action must wait, and for how long.
type hold struct {
	reason, message string
	after           time.Duration
	// brake is the zone (clusterZone: the cluster) whose brake holds the
	// pod: its Event is the brake's, not the pod's (noteHeld). "" for a
	// hold of this pod alone (a token, a Lease read, a budget).
	brake string
}

// transition is one brake as judged: engaged before and now, the counts it
// was judged on (why, for the log and the hold; unhealthy, for the gauge)
// and, for an engaged brake, when it was last judged engaged before.
type transition struct {
	brake       string // a zone, or clusterZone
	was, on     bool
	lastEngaged time.Time
	unhealthy   int
	why         string
}

// released: the brake was engaged and is no more; the silence it covered
// (renewals last seen before lastEngaged) restarts.
func (t transition) released() bool { return t.was && !t.on }

// judgeArea judges the brakes in scope (clusterZone for the cluster's, a
// zone for a zone's), in order, against a and l; engaged is every engaged
// brake and when it was last judged engaged. The cluster's comes first: it
// holds everything, and a zone behind it is not judged. It stops at the
// first brake that holds: hold says so and transitions ends with it; nil
// when none does.
func judgeArea(a area, scope []string, engaged map[string]time.Time, l limits) (*hold, []transition) {
	var ts []transition
	for _, brake := range scope {
		var h *hold
		t := transition{brake: brake}
		t.lastEngaged, t.was = engaged[brake]
		if brake == clusterZone {
			t.on, t.unhealthy, t.why, h = judgeCluster(a.cluster, l.clusterThreshold)
		} else {
			t.on, t.unhealthy, t.why, h = judgeZone(brake, a.zones[brake], l.threshold)
		}
		ts = append(ts, t)
		if h != nil {
			return h, ts
		}
	}
	return nil, ts
}

// judgeCluster: more than threshold of the nodes that carry managed pods
// unhealthy, or of all node Leases silent, and at least
// minSilentClusterNodes of them.
func judgeCluster(c zoneState, threshold float64) (on bool, unhealthy int, why string, h *hold) {
	carriers := c.unhealthy >= minSilentClusterNodes && share(c.unhealthy, c.carrier) > threshold
	leases := c.silentLeases >= minSilentClusterNodes && share(c.silentLeases, c.leases) > threshold
	on = threshold < 1 && (carriers || leases)
	why = fmt.Sprintf("%d of %d nodes carrying managed pods are unhealthy and %d of %d node Leases silent for --lease-lost-after, cluster-wide "+
		"(threshold %.0f%%, at least %d)", c.unhealthy, c.carrier, c.silentLeases, c.leases, 100*threshold, minSilentClusterNodes)
	if on {
		h = &hold{reason: ReasonPartitionSuspected, after: brakeRecheck, brake: clusterZone,
			message: why + ": the control plane, or trainguard's watch, is suspected, not the nodes (--unhealthy-cluster-threshold); " +
				"no pod is evicted or deleted until it recovers"}
	}
	return on, c.unhealthy, why, h
}

// judgeZone: at least minUnhealthyNodes of the zone's carriers unhealthy,
// and more than threshold of them.
func judgeZone(zone string, z zoneState, threshold float64) (on bool, unhealthy int, why string, h *hold) {
	on = z.unhealthy >= minUnhealthyNodes && z.fraction() > threshold
	why = fmt.Sprintf("%d of %d nodes carrying managed pods in zone %q are NotReady/Unknown (%.0f%%, threshold %.0f%%, at least %d)",
		z.unhealthy, z.carrier, zone, 100*z.fraction(), 100*threshold, minUnhealthyNodes)
	if on {
		h = &hold{reason: ReasonPartitionSuspected, after: brakeRecheck, brake: zone,
			message: why + ": suspected partition (--unhealthy-zone-threshold); no pod in the zone is evicted or deleted until it recovers"}
	}
	return on, z.unhealthy, why, h
}
