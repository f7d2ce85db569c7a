package scale

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPairRounds: one slow trainguard burst decides a pooled p99 but is
// one round of many in the paired view, and it names what else was slow
// in its round.
func TestPairRounds(t *testing.T) {
	var rounds []round
	for i := range 10 {
		rd := round{p99: map[string]float64{jobTrainguard: 220, jobNoop: 200, jobContent: 230, "bare/noop": 210}, during: RoundDetail{ServeMeanMs: 0.9}}
		if i == 7 {
			rd.p99[jobTrainguard], rd.p99["bare/noop"], rd.during.GCs = 800, 600, 2
		}
		rounds = append(rounds, rd)
	}
	r := pairRounds(rounds, 2)
	assert.InDelta(t, 1.1, r.RatioP50, 1e-9)
	assert.Equal(t, 1, r.Over, "only round 7 is over the target")
	assert.InDelta(t, 1.15, r.ContentP50, 1e-9, "the stored pods through the no-op, per round")
	require.Len(t, r.Slowest, 2)
	s := r.Slowest[0]
	assert.Equal(t, 7, s.Round)
	assert.InDelta(t, 800.0, s.TrainguardP99, 1e-9)
	assert.InDelta(t, 200.0, s.NoopP99, 1e-9)
	assert.Equal(t, "bare/noop", s.SlowestOther)
	assert.InDelta(t, 600.0, s.SlowestOtherP99, 1e-9)
	assert.InDelta(t, 2.0, s.GCs, 1e-9)
	assert.InDelta(t, 220.0, r.Slowest[1].TrainguardP99, 1e-9)
}
