package rescheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJudgeArea is the area brakes' table, as TestDecide is the decisions':
// the cases the brake tests drive through a fake API server (the zone and
// cluster brakes, a partition suspected, a release, the thresholds) and
// the edges at each limit, judged from counts alone.
func TestJudgeArea(t *testing.T) {
	defaults := limits{threshold: 0.55, clusterThreshold: 0.5}
	earlier := t0.Add(-time.Minute)
	// carriers is a count: unhealthy of carrier nodes.
	carriers := func(unhealthy, carrier int) zoneState { return zoneState{unhealthy: unhealthy, carrier: carrier} }
	// counted is an area with zone z1 and, cluster-wide, the same nodes
	// plus healthy ones elsewhere: cluster is the cluster's count.
	counted := func(cluster, z1 zoneState) area {
		return area{at: t0, cluster: cluster, zones: map[string]zoneState{"z1": z1}}
	}
	off := func(brake string, unhealthy int) transition { return transition{brake: brake, unhealthy: unhealthy} }
	engages := func(brake string, unhealthy int) transition {
		return transition{brake: brake, on: true, unhealthy: unhealthy}
	}
	stays := func(brake string, unhealthy int) transition {
		return transition{brake: brake, was: true, on: true, lastEngaged: earlier, unhealthy: unhealthy}
	}
	releases := func(brake string, unhealthy int) transition {
		return transition{brake: brake, was: true, lastEngaged: earlier, unhealthy: unhealthy}
	}
	both := []string{clusterZone, "z1"}

	for _, tc := range []struct {
		name    string
		area    area
		scope   []string
		engaged map[string]time.Time
		limits  limits
		heldBy  string // the brake whose hold it is, when the last one judged is engaged
		want    []transition
	}{
		// The zone brake (TestZoneBrake).
		{name: "healthy", area: counted(carriers(0, 30), carriers(0, 10)), scope: both,
			want: []transition{off(clusterZone, 0), off("z1", 0)}},
		{name: "6 of 10 in a zone: a suspected partition", area: counted(carriers(6, 30), carriers(6, 10)), scope: both,
			heldBy: "z1", want: []transition{off(clusterZone, 6), engages("z1", 6)}},
		{name: "5 of 10: 50% is not more than 55%", area: counted(carriers(5, 30), carriers(5, 10)), scope: both,
			want: []transition{off(clusterZone, 5), off("z1", 5)}},
		{name: "3 of 13", area: counted(carriers(3, 30), carriers(3, 13)), scope: both,
			want: []transition{off(clusterZone, 3), off("z1", 3)}},
		{name: "2 of 2: fewer than 3 is a normal failure", area: counted(carriers(2, 30), carriers(2, 2)), scope: both,
			want: []transition{off(clusterZone, 2), off("z1", 2)}},
		{name: "3 of 3: the zone's minimum", area: counted(carriers(3, 30), carriers(3, 3)), scope: both,
			heldBy: "z1", want: []transition{off(clusterZone, 3), engages("z1", 3)}},
		{name: "exactly the zone threshold is not more", area: counted(carriers(4, 30), carriers(4, 8)), scope: both,
			limits: limits{threshold: 0.5, clusterThreshold: 0.5}, want: []transition{off(clusterZone, 4), off("z1", 4)}},
		{name: "just over the zone threshold", area: counted(carriers(5, 30), carriers(5, 9)), scope: both,
			limits: limits{threshold: 0.5, clusterThreshold: 0.5}, heldBy: "z1", want: []transition{off(clusterZone, 5), engages("z1", 5)}},
		{name: "zone threshold 1 turns the zone brake off", area: counted(carriers(10, 30), carriers(10, 10)), scope: both,
			limits: limits{threshold: 1, clusterThreshold: 0.5}, want: []transition{off(clusterZone, 10), off("z1", 10)}},
		{name: "a zone with no carriers", area: counted(carriers(0, 30), carriers(0, 0)), scope: both,
			want: []transition{off(clusterZone, 0), off("z1", 0)}},
		{name: "nodes without a zone are one zone", area: area{cluster: carriers(4, 30), zones: map[string]zoneState{"": carriers(4, 5)}},
			scope: []string{clusterZone, ""}, want: []transition{off(clusterZone, 4), engages("", 4)}},

		// The cluster brake (TestClusterBrake): it comes first and holds
		// everything; the zone behind it is not judged.
		{name: "all six carriers silent: a stale view", area: counted(carriers(6, 6), carriers(2, 2)), scope: both,
			heldBy: clusterZone, want: []transition{engages(clusterZone, 6)}},
		{name: "four of six", area: counted(carriers(4, 6), carriers(2, 2)), scope: both,
			heldBy: clusterZone, want: []transition{engages(clusterZone, 4)}},
		{name: "three of six: half is not more than half", area: counted(carriers(3, 6), carriers(2, 2)), scope: both,
			want: []transition{off(clusterZone, 3), off("z1", 2)}},
		{name: "one of one: a tiny cluster's lost node", area: counted(carriers(1, 1), carriers(1, 1)), scope: both,
			want: []transition{off(clusterZone, 1), off("z1", 1)}},
		{name: "two of two: the cluster's minimum", area: counted(carriers(2, 2), carriers(2, 2)), scope: both,
			heldBy: clusterZone, want: []transition{engages(clusterZone, 2)}},
		{name: "the Leases alone: five of six silent, the carriers Ready",
			area: counted(zoneState{carrier: 6, silentLeases: 5, leases: 6}, carriers(0, 2)), scope: both,
			heldBy: clusterZone, want: []transition{engages(clusterZone, 0)}},
		{name: "one silent Lease of one", area: counted(zoneState{carrier: 1, silentLeases: 1, leases: 1}, carriers(0, 1)), scope: both,
			want: []transition{off(clusterZone, 0), off("z1", 0)}},
		{name: "half the Leases silent", area: counted(zoneState{carrier: 6, silentLeases: 3, leases: 6}, carriers(0, 2)), scope: both,
			want: []transition{off(clusterZone, 0), off("z1", 0)}},
		{name: "cluster threshold 1 turns the cluster brake off; the zone's still judges",
			area: counted(zoneState{unhealthy: 10, carrier: 10, silentLeases: 10, leases: 10}, carriers(10, 10)), scope: both,
			limits: limits{threshold: 0.55, clusterThreshold: 1}, heldBy: "z1", want: []transition{off(clusterZone, 10), engages("z1", 10)}},
		{name: "a gone node has no zone: the cluster's alone", area: counted(carriers(0, 6), carriers(0, 2)), scope: []string{clusterZone},
			want: []transition{off(clusterZone, 0)}},

		// Engaged before: held on, or released with the time its silence
		// is covered until (TestBrakeReleaseRestartsSilence,
		// TestLeaderReleasesTheBrakeOfAHealthyCluster).
		{name: "the cluster stays engaged", area: counted(carriers(6, 6), carriers(2, 2)), scope: both,
			engaged: map[string]time.Time{clusterZone: earlier}, heldBy: clusterZone, want: []transition{stays(clusterZone, 6)}},
		{name: "the cluster releases: two of six", area: counted(carriers(2, 6), carriers(0, 2)), scope: both,
			engaged: map[string]time.Time{clusterZone: earlier}, want: []transition{releases(clusterZone, 2), off("z1", 0)}},
		{name: "the zone releases under a healthy cluster", area: counted(carriers(1, 30), carriers(1, 10)), scope: both,
			engaged: map[string]time.Time{"z1": earlier}, want: []transition{off(clusterZone, 1), releases("z1", 1)}},
		{name: "the cluster holds: an engaged zone behind it is not released",
			area: counted(carriers(6, 6), carriers(0, 2)), scope: both,
			engaged: map[string]time.Time{clusterZone: earlier, "z1": earlier}, heldBy: clusterZone, want: []transition{stays(clusterZone, 6)}},
		{name: "the leader's look at one engaged zone", area: counted(carriers(0, 30), carriers(0, 10)), scope: []string{"z1"},
			engaged: map[string]time.Time{"z1": earlier}, want: []transition{releases("z1", 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.limits
			if l == (limits{}) {
				l = defaults
			}
			h, got := judgeArea(tc.area, tc.scope, tc.engaged, l)
			for i := range got {
				assert.NotEmpty(t, got[i].why, "a judgement says its counts")
				got[i].why = ""
			}
			assert.Equal(t, tc.want, got)
			if !wantsHold(tc.want) {
				assert.Nil(t, h)
				return
			}
			require.NotNil(t, h)
			assert.Equal(t, ReasonPartitionSuspected, h.reason)
			assert.Equal(t, tc.heldBy, h.brake)
			assert.Equal(t, brakeRecheck, h.after)
			flag := "--unhealthy-zone-threshold"
			if tc.heldBy == clusterZone {
				flag = "--unhealthy-cluster-threshold"
			}
			assert.Contains(t, h.message, flag, "the hold names the setting")
		})
	}
}

// wantsHold: the last brake judged is engaged.
func wantsHold(ts []transition) bool { return len(ts) > 0 && ts[len(ts)-1].on }

// TestJudgeAreaIsPure: the judge reads its inputs and writes none of them.
func TestJudgeAreaIsPure(t *testing.T) {
	engaged := map[string]time.Time{clusterZone: t0}
	a := area{cluster: zoneState{unhealthy: 1, carrier: 6}, zones: map[string]zoneState{"z1": {unhealthy: 4, carrier: 4}}}
	first, ts1 := judgeArea(a, []string{clusterZone, "z1"}, engaged, limits{threshold: 0.55, clusterThreshold: 0.5})
	second, ts2 := judgeArea(a, []string{clusterZone, "z1"}, engaged, limits{threshold: 0.55, clusterThreshold: 0.5})
	assert.Equal(t, first, second)
	assert.Equal(t, ts1, ts2)
	assert.Equal(t, map[string]time.Time{clusterZone: t0}, engaged, "the engaged brakes are the caller's to change")
}
