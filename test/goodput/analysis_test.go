package goodput

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)

// logOf writes the example trainer's lines: steps from..to (inclusive) of
// rank 0 one second apart starting at start, with a loss that depends only
// on the step (a deterministic trainer).
func logOf(start time.Time, from, to int) []string {
	var ls []string
	for s := from; s <= to; s++ {
		ls = append(ls, fmt.Sprintf("%s rank 0: completed step %d loss %.6f", start.Add(time.Duration(s-from)*time.Second).Format(time.RFC3339Nano), s, 1/float64(s)))
	}
	return ls
}

func resume(at time.Time, rank, step int) string {
	return fmt.Sprintf("%s rank %d: resumed from /checkpoint/x at step %d, metrics {}", at.Format(time.RFC3339Nano), rank, step)
}

func TestETTRCountsOnlyStepsNeverRedone(t *testing.T) {
	// steps 1..100 in 100 s; a crash at 100 s; back at 130 s from the step-90
	// checkpoint; steps 91..160 from 131 s to 200 s.
	lines := logOf(t0, 1, 100)
	lines = append(lines, resume(t0.Add(130*time.Second), 0, 90), resume(t0.Add(130*time.Second), 1, 90))
	lines = append(lines, logOf(t0.Add(131*time.Second), 91, 160)...)
	lines = append(lines, lines[:10]...) // a log read twice
	s := NewSeries(lines)
	step := s.StepTime()
	assert.Equal(t, time.Second, step)
	end := t0.Add(200 * time.Second)
	assert.Equal(t, 160, s.Progress(end))
	assert.Equal(t, 90, s.Progress(t0.Add(130*time.Second)), "a resume takes progress back")
	// from step 1 at t0 to step 160 at 200 s: 159 steps of 1 s in 200 s
	assert.InDelta(t, 159.0/200, ETTR(s, step, t0, end), 1e-9)

	im := ImpactOf(s, step, t0.Add(100*time.Second+time.Millisecond), end)
	assert.True(t, im.Restarted)
	assert.Equal(t, 90, im.Resumed)
	assert.Equal(t, 100, im.LastStep)
	assert.Equal(t, 10, im.StepsLost)
	assert.Equal(t, 31*time.Second-time.Millisecond, im.ToTrain)
	// the interval's wall time (100 s less 1 ms) minus its gain (60 steps)
	assert.Equal(t, 40*time.Second-time.Millisecond, im.LostTime)

	// the shares of all intervals add up to the run's lost time
	a := ImpactOf(s, step, t0, t0.Add(100*time.Second+time.Millisecond))
	total := end.Sub(t0) - time.Duration(s.Progress(end)-s.Progress(t0))*step
	assert.Equal(t, total, a.LostTime+im.LostTime)
	assert.Empty(t, Corruption("arm", s, map[int]string{}, time.Minute))
}

func TestImpactOfAStallAndOfNothing(t *testing.T) {
	s := NewSeries(logOf(t0, 1, 50))
	stalled := ImpactOf(s, time.Second, t0.Add(60*time.Second), t0.Add(120*time.Second))
	assert.True(t, stalled.Stalled)
	assert.False(t, stalled.Restarted)
	assert.Equal(t, 60*time.Second, stalled.LostTime)
	assert.Equal(t, "not training again / - / 1m0s", stalled.String())
	kept := ImpactOf(s, time.Second, t0.Add(10*time.Second), t0.Add(20*time.Second))
	assert.False(t, kept.Stalled)
	assert.Equal(t, time.Duration(0), kept.LostTime)
	assert.Equal(t, "kept training / 0 / 0s", kept.String())
	// steps until 49 s, then nothing until the interval's end: it stopped
	stopped := ImpactOf(s, time.Second, t0.Add(45*time.Second), t0.Add(120*time.Second))
	assert.True(t, stopped.Stalled)
	assert.Equal(t, "not training again / - / 1m11s", stopped.String())
}

func TestCorruptionIsFound(t *testing.T) {
	losses := map[int]string{}
	good := NewSeries(logOf(t0, 1, 20))
	require.Empty(t, Corruption("a", good, losses, time.Minute))

	// another arm: step 5's loss differs (its state was not restored exactly)
	bad := NewSeries(append(logOf(t0, 1, 4), fmt.Sprintf("%s rank 0: completed step 5 loss 0.999999", t0.Add(5*time.Second).Format(time.RFC3339Nano))))
	assert.Equal(t, []string{"b: step 5 loss 0.999999, elsewhere 0.200000"}, Corruption("b", bad, losses, time.Minute))

	// a resume ahead of what was trained, and a rank 1 that resumed elsewhere
	ahead := NewSeries(append(logOf(t0, 1, 10), resume(t0.Add(20*time.Second), 0, 15), resume(t0.Add(20*time.Second), 1, 10)))
	got := Corruption("c", ahead, losses, time.Minute)
	require.Len(t, got, 2)
	assert.Contains(t, got[0], "c: rank 0 resumed at step 15")
	assert.Contains(t, got[0], "after at most step 10 was completed")
	assert.Contains(t, got[1], "rank 1 not at the same step")
}

// A resume ahead of the steps the harness saw (a pod's last lines fell
// between two log reads; a partitioned node's are never read) is no
// corruption when its checkpoint holds that step's loss as the runs that
// completed it logged it; it is when the loss differs or is not there.
func TestAResumeAheadOfTheLogIsCheckedByItsCheckpointsLoss(t *testing.T) {
	resumeWith := func(at time.Time, rank, step int, loss string) string {
		return fmt.Sprintf("%s rank %d: resumed from /checkpoint/step-%d at step %d, metrics {'step': %d, 'loss': %s}",
			at.Format(time.RFC3339Nano), rank, step, step, step, loss)
	}
	p, ok := ParseLine(resumeWith(t0, 0, 15, "0.06666666790843010"))
	require.True(t, ok)
	assert.Equal(t, Point{T: t0, Rank: 0, Step: 15, Resume: true, Loss: "0.066667", From: "/checkpoint/step-15"}, p)

	other := NewSeries(logOf(t0, 1, 20)) // another arm completed steps 1..20
	for name, tc := range map[string]struct {
		loss string
		bad  bool
	}{
		"that step's loss":   {"0.0666666679084301", false},
		"another step's":     {"0.1", true},
		"none in the line":   {"", true},
		"the loss as an exp": {"6.666666790843010e-02", false},
	} {
		t.Run(name, func(t *testing.T) {
			r0 := resumeWith(t0.Add(20*time.Second), 0, 15, tc.loss)
			r1 := resumeWith(t0.Add(20*time.Second), 1, 15, tc.loss)
			if tc.loss == "" {
				r0, r1 = resume(t0.Add(20*time.Second), 0, 15), resume(t0.Add(20*time.Second), 1, 15)
			}
			seen := NewSeries(append(logOf(t0, 1, 10), r0, r1)) // steps 11..15 unseen
			got := Corruption("c", seen, Losses(other, seen), time.Minute)
			if !tc.bad {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			assert.Contains(t, got[0], "c: rank 0 resumed at step 15")
			assert.Contains(t, got[0], `that step's loss elsewhere "0.066667"`)
		})
	}

	// no run completed step 15 where the harness saw it: nothing to compare
	alone := NewSeries(append(logOf(t0, 1, 10),
		resumeWith(t0.Add(20*time.Second), 0, 15, "0.5"), resumeWith(t0.Add(20*time.Second), 1, 15, "0.5")))
	assert.Empty(t, Corruption("d", alone, Losses(NewSeries(logOf(t0, 1, 12)), alone), time.Minute))
}
