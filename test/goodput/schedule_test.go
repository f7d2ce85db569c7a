package goodput

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScheduleIsReproducibleFromItsSeed(t *testing.T) {
	a, err := Schedule(42, 30*time.Minute, 3*time.Minute, nil)
	require.NoError(t, err)
	b, err := Schedule(42, 30*time.Minute, 3*time.Minute, nil)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.Equal(t, Format(42, a), Format(42, b))
	c, err := Schedule(43, 30*time.Minute, 3*time.Minute, nil)
	require.NoError(t, err)
	assert.NotEqual(t, a, c, "another seed, another schedule")

	// one disruption per interval after the undisturbed first, each in the
	// first three quarters of its interval
	require.Len(t, a, 9)
	for i, e := range a {
		start := time.Duration(i+1) * 3 * time.Minute
		assert.GreaterOrEqual(t, e.At, start)
		assert.Less(t, e.At, start+3*time.Minute*3/4)
		assert.Contains(t, Kinds, e.Kind)
		assert.Contains(t, []int{0, 1}, e.Slot)
	}
}

func TestShortFormHasEveryKindOnceInASeededOrder(t *testing.T) {
	a, b := Short(7, time.Minute), Short(7, time.Minute)
	assert.Equal(t, a, b)
	seen := map[Kind]int{}
	for i, e := range a {
		seen[e.Kind]++
		assert.Equal(t, time.Duration(i+1)*time.Minute, e.At)
	}
	assert.Len(t, seen, len(Kinds))
	for k, n := range seen {
		assert.Equal(t, 1, n, "%s", k)
	}
	orders := map[string]bool{}
	for seed := int64(0); seed < 5; seed++ {
		orders[Format(seed, Short(seed, time.Minute))] = true
	}
	assert.Greater(t, len(orders), 1, "the order depends on the seed")
}

func TestScheduleRefusesBadArguments(t *testing.T) {
	_, err := Schedule(1, time.Minute, 5*time.Second, nil)
	assert.ErrorContains(t, err, "interval 5s: must be at least 10s")
	_, err = Schedule(1, time.Minute, time.Minute, nil)
	assert.ErrorContains(t, err, "must be at least two intervals")
	_, err = ParseKinds("drain,reboot")
	assert.ErrorContains(t, err, `unknown disruption kind "reboot"`)
	ks, err := ParseKinds("drain, rank-kill")
	require.NoError(t, err)
	assert.Equal(t, []Kind{Drain, RankKill}, ks)
	evs, err := Schedule(1, 10*time.Minute, time.Minute, ks)
	require.NoError(t, err)
	for _, e := range evs {
		assert.Contains(t, ks, e.Kind)
	}
}
