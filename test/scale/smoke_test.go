package scale

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSmoke is make scale at 200 nodes (CI's run, part of make test): a
// control-plane stall (every Lease stops) must evict and delete nothing,
// and a zone outage must give every affected training pod its decision.
// Leases are 20 s (trainguard's --lease-lost-after and --force-delete-after
// with them) so the two scenarios fit CI's budget.
func TestSmoke(t *testing.T) {
	o := Defaults()
	o.Nodes, o.TrainingPods, o.Jobs, o.OtherPods, o.Namespaces = 200, 1000, 40, 200, 8
	o.LeaseSeconds = 20
	o.Scenarios = []string{"stall", "outage"}
	o.WorkDir = t.TempDir()
	if dir := os.Getenv("TRAINGUARD_SCALE_WORKDIR"); dir != "" {
		o.WorkDir = dir // kept: the logs and report.json
	}
	o.Out = os.Stdout
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r, err := Run(ctx, o)
	require.NoError(t, err)
	assert.Zero(t, r.ActionsDuringSetup, "nothing evicted while the cluster is healthy")
	require.NotNil(t, r.Stall)
	assert.Zero(t, r.Stall.Evicted, "a control-plane stall must evict nothing")
	assert.Zero(t, r.Stall.ForceDeleted, "a control-plane stall must force-delete nothing")
	assert.Zero(t, r.Stall.PodsGone, "no managed pod may disappear in a stall")
	assert.Zero(t, r.Stall.EvictedAfter, "nothing evicted when the Leases come back")
	assert.Zero(t, r.Stall.ForceDeletedAfter, "nothing force-deleted when the Leases come back")
	assert.NotZero(t, r.Stall.BrakeAfter, "the cluster brake engages")
	assert.True(t, r.Stall.BrakeReleased, "the cluster brake releases once the Leases are back")
	require.NotNil(t, r.Outage)
	assert.Positive(t, r.Outage.AffectedPods)
	assert.Equal(t, r.Outage.AffectedPods, r.Outage.Decided, "every training pod of the silent zone has its decision")
	assert.Zero(t, r.Outage.OtherZonesActedOn, "no action on the other zones")
	assert.True(t, r.Outage.BrakeEngaged, "the zone brake holds a whole silent zone")
	assert.True(t, r.Outage.BrakeReleased, "the zone brake releases once the zone is back")
}
