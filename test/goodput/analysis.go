package goodput

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Point is one line of a trainer's log that the analysis reads: a rank's
// completed step (with its loss, printed to six decimals) or its resume
// (with the loss of the step it resumed at, as its checkpoint holds it, to
// six decimals; "" if the line has none, and where it resumed from: a
// checkpoint, or "peer:rank<R>", a survivor's memory in trainguard's
// in-process recovery).
type Point struct {
	T      time.Time
	Rank   int
	Step   int
	Resume bool
	Loss   string
	From   string
}

var (
	completedLine = regexp.MustCompile(`^(\S+) (?:\[\w+\]:)?rank (\d+): completed step (\d+) loss (\S+)`)
	resumedLine   = regexp.MustCompile(`^(\S+) (?:\[\w+\]:)?rank (\d+): resumed from (\S+) at step (\d+)(?:, metrics \{.*'loss': ([-+0-9.eE]+))?`)
)

// ParseLine reads one kubelet-timestamped log line of the example trainer.
func ParseLine(l string) (Point, bool) {
	if m := completedLine.FindStringSubmatch(l); m != nil {
		t, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return Point{}, false
		}
		r, _ := strconv.Atoi(m[2])
		s, _ := strconv.Atoi(m[3])
		return Point{T: t, Rank: r, Step: s, Loss: m[4]}, true
	}
	if m := resumedLine.FindStringSubmatch(l); m != nil {
		t, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return Point{}, false
		}
		r, _ := strconv.Atoi(m[2])
		s, _ := strconv.Atoi(m[4])
		p := Point{T: t, Rank: r, Step: s, Resume: true, From: m[3]}
		if l, err := strconv.ParseFloat(m[5], 64); err == nil {
			p.Loss = fmt.Sprintf("%.6f", l) // as the trainer prints a completed step's
		}
		return p, true
	}
	return Point{}, false
}

// Series is everything one arm's trainers logged, in time order.
type Series []Point

// NewSeries parses log lines (duplicates, as repeated reads of one log
// give, are dropped) and sorts them by time.
func NewSeries(lines []string) Series {
	seen := map[string]bool{}
	var s Series
	for _, l := range lines {
		if seen[l] {
			continue
		}
		seen[l] = true
		if p, ok := ParseLine(l); ok {
			s = append(s, p)
		}
	}
	sort.SliceStable(s, func(i, j int) bool { return s[i].T.Before(s[j].T) })
	return s
}

// rank0 is rank 0's completed steps: the job's progress (every rank holds
// the same state after each step).
func (s Series) rank0() Series {
	var out Series
	for _, p := range s {
		if p.Rank == 0 && !p.Resume {
			out = append(out, p)
		}
	}
	return out
}

// Progress is the last step rank 0 completed at or before t (0 before any):
// the step the job would continue from, had it run on undisturbed. A
// resume at an earlier step lowers it: the steps between are redone.
func (s Series) Progress(t time.Time) int {
	step := 0
	for _, p := range s {
		if p.T.After(t) {
			break
		}
		if p.Rank == 0 { // a completed step, or a resume (which may go back)
			step = p.Step
		}
	}
	return step
}

// StepTime is the undisturbed step time: the median time between two
// consecutive steps (n, n+1) of one incarnation of rank 0.
func (s Series) StepTime() time.Duration {
	var d []time.Duration
	var prev *Point
	for i := range s {
		p := &s[i]
		if p.Rank != 0 {
			continue
		}
		if p.Resume {
			prev = nil
			continue
		}
		if prev != nil && p.Step == prev.Step+1 {
			d = append(d, p.T.Sub(prev.T))
		}
		prev = p
	}
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// ETTR is committed progress over wall time in [from, to]: the steps gained
// (never redone) times the undisturbed step time, divided by to-from.
func ETTR(s Series, step time.Duration, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	gained := s.Progress(to) - s.Progress(from)
	return float64(time.Duration(gained)*step) / float64(to.Sub(from))
}

// Impact is what one disruption cost one arm.
type Impact struct {
	Restarted bool          // a new incarnation of rank 0 resumed inside the interval
	ToTrain   time.Duration // disruption → rank 0's first step after that resume
	Resumed   int           // the step it resumed at
	LastStep  int           // the last step rank 0 completed before that resume
	StepsLost int           // LastStep - Resumed (never negative)
	Stalled   bool          // no resume and no progress up to the interval's end
	// LostTime is the interval's wall time minus its committed progress
	// (steps gained times the step time): the disruption's share of the
	// arm's lost time. The shares of all intervals add up to the run's.
	LostTime time.Duration
}

// ImpactOf measures one disruption at at, whose interval ends at end (the
// next disruption or the end of the run).
func ImpactOf(s Series, step time.Duration, at, end time.Time) Impact {
	var im Impact
	gained := s.Progress(end) - s.Progress(at)
	im.LostTime = end.Sub(at) - time.Duration(gained)*step
	var resume *Point
	for i := range s {
		p := &s[i]
		if p.Rank == 0 && p.Resume && !p.T.Before(at) && p.T.Before(end) {
			resume = p
			break
		}
	}
	if resume == nil {
		// kept training: rank 0 still completes steps at the interval's
		// end (a job that stopped without restarting has not)
		last := time.Time{}
		for _, p := range s {
			if p.Rank == 0 && !p.Resume && !p.T.Before(at) && p.T.Before(end) {
				last = p.T
			}
		}
		im.Stalled = gained <= 0 || last.Before(end.Add(-max(10*step, 5*time.Second)))
		return im
	}
	im.Restarted, im.Resumed = true, resume.Step
	im.LastStep = s.Progress(resume.T.Add(-time.Nanosecond))
	im.StepsLost = max(im.LastStep-im.Resumed, 0)
	for _, p := range s {
		if p.Rank == 0 && !p.Resume && p.T.After(resume.T) {
			im.ToTrain = p.T.Sub(at)
			break
		}
	}
	if im.ToTrain == 0 {
		im.Stalled = true
	}
	return im
}

// Losses is the loss of every step rank 0 completed, in any arm (the first
// seen): what Corruption compares every arm with.
func Losses(series ...Series) map[int]string {
	losses := map[int]string{}
	for _, s := range series {
		for _, p := range s.rank0() {
			if _, ok := losses[p.Step]; !ok {
				losses[p.Step] = p.Loss
			}
		}
	}
	return losses
}

// Corruption lists what says an arm's training state went wrong: a step
// whose loss differs between incarnations or arms (the example trainer is
// deterministic: a state restored exactly gives the same loss at every
// step), a resume ahead of every step completed before it whose restored
// state is not that step's, and ranks of one incarnation resuming at
// different steps. losses is every arm's (Losses; a step missing there is
// added, as this arm first completed it).
//
// A resume may be ahead of the steps the harness saw without anything
// wrong: a pod's last lines before its deletion can fall between two log
// reads, and a partitioned node's are never read. So such a resume is
// checked by the loss its checkpoint holds, which must be the loss of that
// step in the runs that completed it. When no run was seen completing that
// step (the others stand still: the arm a crash did not stop), nothing can
// be compared and the resume is accepted.
func Corruption(arm string, s Series, losses map[int]string, rankGap time.Duration) []string {
	var out []string
	maxDone := 0
	for i, p := range s {
		switch {
		case p.Resume && p.Rank == 0:
			if l, ok := losses[p.Step]; p.Step > maxDone && (p.Loss == "" || ok && p.Loss != l) {
				out = append(out, fmt.Sprintf("%s: rank 0 resumed at step %d (loss %q) at %s, after at most step %d was completed; that step's loss elsewhere %q",
					arm, p.Step, p.Loss, p.T.Format(time.RFC3339), maxDone, losses[p.Step]))
			}
			// a rank restarted in process takes a survivor's state, which
			// kept its process and logs no resume
			if !strings.HasPrefix(p.From, "peer:") && !peerResumed(s, i, rankGap) {
				out = append(out, fmt.Sprintf("%s: rank 0 resumed at step %d at %s, rank 1 not at the same step within %s", arm, p.Step, p.T.Format(time.RFC3339), rankGap))
			}
		case !p.Resume && p.Rank == 0:
			maxDone = max(maxDone, p.Step)
			if l, ok := losses[p.Step]; ok && l != p.Loss {
				out = append(out, fmt.Sprintf("%s: step %d loss %s, elsewhere %s", arm, p.Step, p.Loss, l))
			} else if !ok {
				losses[p.Step] = p.Loss
			}
		}
	}
	return out
}

// peerResumed: rank 1 logged a resume at the same step near the rank 0
// resume at s[i].
func peerResumed(s Series, i int, gap time.Duration) bool {
	r0 := s[i]
	for _, p := range s {
		if p.Resume && p.Rank == 1 && p.Step == r0.Step && absDur(p.T.Sub(r0.T)) <= gap {
			return true
		}
	}
	return false
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// CSV is the arm's progress curve, "arm,seconds,step", from start.
func (s Series) CSV(arm string, start time.Time) string {
	var b strings.Builder
	for _, p := range s.rank0() {
		fmt.Fprintf(&b, "%s,%.3f,%d\n", arm, p.T.Sub(start).Seconds(), p.Step)
	}
	return b.String()
}
