package boost

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func params() Params {
	return Params{Enabled: true, MaxBoost: 100, SaturateAfter: 10 * time.Minute, Hysteresis: 10, MinInterval: time.Minute}
}

func ptr[T any](v T) *T { return &v }

func TestBoundNeverReachesTheNextClass(t *testing.T) {
	for _, tc := range []struct {
		name           string
		max, prio      int32
		next           *int32
		want           int32
		effectiveBelow bool
	}{
		{"no higher class: MaxBoost", 100, 100, nil, 100, false},
		{"wide gap: MaxBoost", 100, 100, ptr[int32](1000), 100, true},
		{"narrow gap: one below the next class", 100, 100, ptr[int32](150), 49, true},
		{"adjacent classes: no boost", 100, 100, ptr[int32](101), 0, true},
		{"same value class: no boost", 100, 100, ptr[int32](100), 0, true},
		{"negative MaxBoost: none", -5, 100, nil, 0, false},
		{"extremes do not overflow", math.MaxInt32, math.MinInt32, ptr[int32](math.MaxInt32), math.MaxInt32, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Bound(tc.max, tc.prio, tc.next)
			assert.Equal(t, tc.want, got)
			if tc.effectiveBelow {
				assert.Less(t, int64(tc.prio)+int64(got), int64(*tc.next)+1)
				if *tc.next > tc.prio {
					assert.Less(t, int64(tc.prio)+int64(got), int64(*tc.next), "a higher class must still preempt the boosted job")
				}
			}
		})
	}
}

func TestWorkAtRisk(t *testing.T) {
	fits := Risk{Known: true, HasCommit: true, SecondsSinceCommit: 900, AckSeconds: 2, GraceSeconds: 60}
	assert.True(t, fits.CheckpointFits())
	assert.Zero(t, fits.SecondsAtRisk(), "a checkpoint that fits its grace period loses nothing")

	slow := fits
	slow.AckSeconds = 45 // more than half of 60 s
	assert.False(t, slow.CheckpointFits())
	assert.InDelta(t, 900, slow.SecondsAtRisk(), 0)

	assert.True(t, math.IsInf(Risk{}.SecondsAtRisk(), 1), "no listening trainer: everything at risk")
	noCommit := slow
	noCommit.HasCommit = false
	assert.True(t, math.IsInf(noCommit.SecondsAtRisk(), 1))
	noGrace := fits
	noGrace.GraceSeconds = 0
	assert.False(t, noGrace.CheckpointFits())
}

func TestTarget(t *testing.T) {
	p := params()
	slow := Risk{Known: true, HasCommit: true, AckSeconds: 100, GraceSeconds: 60}
	for _, tc := range []struct {
		since float64
		want  int32
	}{{0, 0}, {60, 10}, {300, 50}, {599, 100}, {600, 100}, {86400, 100}} {
		slow.SecondsSinceCommit = tc.since
		assert.Equal(t, tc.want, Target(slow, p, 100), "%v s since the commit", tc.since)
	}
	assert.Equal(t, int32(49), Target(Risk{}, p, 49), "unknown: the bound, never more")
	assert.Zero(t, Target(Risk{}, p, 0))
	assert.Zero(t, Target(Risk{Known: true, HasCommit: true, SecondsSinceCommit: 1e6, AckSeconds: 1, GraceSeconds: 60}, p, 100))
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	p := params()
	atRisk := Risk{} // nothing known: the bound
	fits := Risk{Known: true, HasCommit: true, SecondsSinceCommit: 5, AckSeconds: 1, GraceSeconds: 60}
	stale := func(s float64) Risk {
		return Risk{Known: true, HasCommit: true, SecondsSinceCommit: s, AckSeconds: 100, GraceSeconds: 60}
	}

	t.Run("no gate, no writes", func(t *testing.T) {
		off := p
		off.Enabled = false
		for _, cur := range []State{{}, {Boost: 100}, {Boost: 500}, {Boost: -3}} {
			for _, admitted := range []bool{true, false} {
				_, write := Decide(off, admitted, atRisk, 100, cur, now)
				assert.False(t, write, "boost %d admitted %v", cur.Boost, admitted)
			}
		}
	})
	t.Run("first write is immediate", func(t *testing.T) {
		b, write := Decide(p, true, atRisk, 100, State{}, now)
		assert.True(t, write)
		assert.Equal(t, int32(100), b)
	})
	t.Run("bounds: never above the bound", func(t *testing.T) {
		b, write := Decide(p, true, atRisk, 49, State{Boost: 0}, now)
		assert.True(t, write)
		assert.Equal(t, int32(49), b)
		// A lowered bound (a new class in between) or a foreign value
		// applies at once, rate limit or not.
		b, write = Decide(p, true, atRisk, 20, State{Boost: 49, Changed: now}, now)
		assert.True(t, write)
		assert.Equal(t, int32(20), b)
		b, write = Decide(p, true, fits, 100, State{Boost: -50, Changed: now}, now)
		assert.True(t, write)
		assert.Equal(t, int32(0), b)
	})
	t.Run("hysteresis: small moves are not written", func(t *testing.T) {
		_, write := Decide(p, true, stale(330), 100, State{Boost: 50}, now) // 55 vs 50
		assert.False(t, write)
		b, write := Decide(p, true, stale(360), 100, State{Boost: 50}, now) // 60 vs 50
		assert.True(t, write)
		assert.Equal(t, int32(60), b)
		// Both ends are reached exactly, so the boost settles there.
		b, write = Decide(p, true, fits, 100, State{Boost: 5}, now)
		assert.True(t, write)
		assert.Zero(t, b)
		b, write = Decide(p, true, stale(9999), 100, State{Boost: 95}, now)
		assert.True(t, write)
		assert.Equal(t, int32(100), b)
	})
	t.Run("rate limit: one change per MinInterval", func(t *testing.T) {
		cur := State{Boost: 100, Changed: now.Add(-30 * time.Second)}
		_, write := Decide(p, true, fits, 100, cur, now)
		assert.False(t, write, "changed 30 s ago")
		b, write := Decide(p, true, fits, 100, cur, now.Add(31*time.Second))
		assert.True(t, write)
		assert.Zero(t, b)
	})
	t.Run("a flapping job writes at most once per interval", func(t *testing.T) {
		cur := State{}
		writes := 0
		for i := range 600 { // 10 minutes, one look a second, risk flipping every second
			at := now.Add(time.Duration(i) * time.Second)
			r := fits
			if i%2 == 1 {
				r = atRisk
			}
			if b, write := Decide(p, true, r, 100, cur, at); write {
				cur = State{Boost: b, Changed: at}
				writes++
			}
		}
		assert.LessOrEqual(t, writes, 11)
	})
	t.Run("not admitted: cleared at once", func(t *testing.T) {
		b, write := Decide(p, false, atRisk, 100, State{Boost: 100, Changed: now}, now)
		assert.True(t, write)
		assert.Zero(t, b)
		_, write = Decide(p, false, atRisk, 100, State{}, now)
		assert.False(t, write, "nothing to clear")
	})
}
