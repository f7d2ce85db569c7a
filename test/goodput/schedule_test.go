package goodput

import (
	"os"
	"strings"
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
	a, b := Short(7, time.Minute, nil), Short(7, time.Minute, nil)
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
		orders[Format(seed, Short(seed, time.Minute, nil))] = true
	}
	assert.Greater(t, len(orders), 1, "the order depends on the seed")

	some := Short(7, time.Minute, []Kind{RankKill, Drain})
	require.Len(t, some, 2)
	assert.ElementsMatch(t, []Kind{RankKill, Drain}, []Kind{some[0].Kind, some[1].Kind})
}

// make e2e's short form: every one of ShortKinds once, the node crash last
// (a crash leaves a job on two workers one node for the rest of the run).
func TestMakeE2EShortFormEndsWithTheNodeCrash(t *testing.T) {
	evs := Short(ShortSeed, 3*time.Minute, ShortKinds)
	require.Len(t, evs, len(ShortKinds))
	assert.Equal(t, Crash, evs[len(evs)-1].Kind)
	var kinds []Kind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	assert.ElementsMatch(t, ShortKinds, kinds)
}

// A second run with the same seed gives the same schedule, in another
// process and another day: the schedules docs/goodput.md printed from its
// runs (the long form's, make e2e's short form) are what the seed gives
// now.
func TestDocumentedSchedulesAreWhatTheirSeedsGive(t *testing.T) {
	doc, err := os.ReadFile("../../docs/goodput.md")
	require.NoError(t, err)
	long, err := Schedule(1, 30*time.Minute, 3*time.Minute, nil)
	require.NoError(t, err)
	for name, want := range map[string]string{
		"long form, seed 1, 30m, one per 3m": Format(1, long),
		"make e2e's short form":              Format(ShortSeed, Short(ShortSeed, 3*time.Minute, ShortKinds)),
	} {
		assert.True(t, strings.Contains(string(doc), want), "docs/goodput.md does not print the schedule of the %s as its seed gives it now:\n%s", name, want)
	}
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

func TestTheWarnedCrashIsAskedForByNameAndWarnsSecondsAhead(t *testing.T) {
	ks, err := ParseKinds("warned-crash,node-crash")
	require.NoError(t, err)
	assert.Equal(t, []Kind{WarnedCrash, Crash}, ks)
	assert.NotContains(t, Kinds, WarnedCrash, "a kind of its own: every seed's schedule stays as documented")
	assert.True(t, WarnedCrash.NodeKind())
	evs, err := Schedule(1, 30*time.Minute, 3*time.Minute, []Kind{WarnedCrash})
	require.NoError(t, err)
	leads := map[time.Duration]bool{}
	for _, e := range evs {
		assert.Equal(t, WarnedCrash, e.Kind)
		assert.GreaterOrEqual(t, e.WarnLead(), 5*time.Second, e.String())
		assert.LessOrEqual(t, e.WarnLead(), 30*time.Second, e.String())
		assert.Less(t, e.WarnLead(), 3*time.Minute/4, "the warning and the crash fall in the event's interval")
		leads[e.WarnLead()] = true
	}
	assert.Greater(t, len(leads), 1, "the lead is seeded, not one constant")
}

func TestTheReportHasARowForEveryKindItRan(t *testing.T) {
	res := &Result{Events: []Applied{{Event: Event{Kind: WarnedCrash}}, {Event: Event{Kind: Crash}}}}
	assert.Equal(t, []Kind{Crash, WarnedCrash}, res.kinds())
}
