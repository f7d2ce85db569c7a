package goodput

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PodSample is one look at a job pod's training container, as the harness
// polls it (every 2 s with the logs). The API's timestamps have whole
// seconds.
type PodSample struct {
	T           time.Time // when it was looked at
	Pod, UID    string
	Created     time.Time
	Restarts    int32     // the kubelet's restart count of the container
	Started     time.Time // the running container's start (zero unless running)
	LastStarted time.Time // the previous container's start and exit code
	LastExit    int32
	Waiting     string // why the container waits: ContainerCreating, CrashLoopBackOff, ...
}

// SampleOf is pod's training container at t.
func SampleOf(p *corev1.Pod, container string, t time.Time) PodSample {
	s := PodSample{T: t, Pod: p.Name, UID: string(p.UID), Created: p.CreationTimestamp.Time}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name != container {
			continue
		}
		s.Restarts = c.RestartCount
		if r := c.State.Running; r != nil {
			s.Started = r.StartedAt.Time
		}
		if w := c.State.Waiting; w != nil {
			s.Waiting = w.Reason
		}
		if l := c.LastTerminationState.Terminated; l != nil {
			s.LastStarted, s.LastExit = l.StartedAt.Time, l.ExitCode
		}
	}
	return s
}

// supervisorLine is trainguard's supervisor starting a trainer again in
// its container: one a signal killed, one an uncaught exception ended, or
// one that exited to rejoin its group (sdk/python/trainguard/_supervise.py).
var supervisorLine = regexp.MustCompile(`^(\S+) trainguard supervise: the trainer \(pid \d+\) (died of \w+|exited 1 \(an uncaught exception\)|exited 75 to rejoin its group at a new generation); starting it again`)

// Timeline is everything recorded of one arm: its trainers' log lines and
// its pods' samples.
type Timeline struct {
	Series     Series
	Supervisor []time.Time // the supervisor started a dead trainer again
	Pods       []PodSample // in time order
}

// NewTimeline reads an arm's log lines (kubelet-timestamped, any order,
// repeats dropped) and its pods' samples.
func NewTimeline(lines []string, pods []PodSample) Timeline {
	tl := Timeline{Series: NewSeries(lines), Pods: slices.Clone(pods)}
	seen := map[string]bool{}
	for _, l := range lines {
		if m := supervisorLine.FindStringSubmatch(l); m != nil && !seen[l] {
			seen[l] = true
			if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
				tl.Supervisor = append(tl.Supervisor, t)
			}
		}
	}
	slices.SortFunc(tl.Supervisor, time.Time.Compare)
	sort.SliceStable(tl.Pods, func(i, j int) bool { return tl.Pods[i].T.Before(tl.Pods[j].T) })
	return tl
}

// Cost is what one disruption cost one arm, split where the time went:
// detection (the disruption → the first replacement started: a trainer
// its supervisor started again, a container the kubelet restarted, a new
// pod), restart (that → rank 0's first step after it, and after its
// resume when it resumed) and recompute (the steps it lost, done again).
type Cost struct {
	Detection, Restart, Recompute time.Duration
	Replaced                      bool // a replacement started in the interval
	Trained                       bool // rank 0 trained after it in the interval
	Kept                          bool // no replacement, and rank 0 trained on
	// Restarts counts the kubelet's restarts of the arm's training
	// containers in the interval, with the exit codes they restarted from
	// (each once);
	// BackOff is how long they waited in CrashLoopBackOff (as sampled).
	Restarts int
	Exits    []int32
	BackOff  time.Duration
}

// Total is detection + restart + recompute: the interval's ETTR is about
// 1 - Total/interval.
func (c Cost) Total() time.Duration { return c.Detection + c.Restart + c.Recompute }

// CostOf splits what the disruption at at cost the arm, in its interval up
// to end (the next disruption or the end of the run). step is the
// undisturbed step time.
func CostOf(tl Timeline, step time.Duration, at, end time.Time) Cost {
	var c Cost
	in := func(t time.Time) bool { return !t.IsZero() && !t.Before(at) && t.Before(end) }
	var replaced time.Time
	first := func(t time.Time) {
		if in(t) && (replaced.IsZero() || t.Before(replaced)) {
			replaced = t
		}
	}
	for _, t := range tl.Supervisor {
		first(t)
	}
	base := map[string]int32{} // each pod's restart count before the disruption
	top := map[string]int32{}
	var prev *PodSample
	last := map[string]*PodSample{}
	for i := range tl.Pods {
		p := &tl.Pods[i]
		if p.T.Before(at) {
			base[p.UID] = p.Restarts
		} else if p.T.Before(end) {
			first(p.Created)
			first(p.Started)
			first(p.LastStarted)
			if p.Restarts > top[p.UID] {
				if p.Restarts > max(base[p.UID], top[p.UID]) && !slices.Contains(c.Exits, p.LastExit) {
					c.Exits = append(c.Exits, p.LastExit)
				}
				top[p.UID] = p.Restarts
			}
		}
		if prev = last[p.UID]; prev != nil && prev.Waiting == "CrashLoopBackOff" {
			from, to := maxTime(prev.T, at), minTime(p.T, end)
			if to.After(from) {
				c.BackOff += to.Sub(from)
			}
		}
		last[p.UID] = p
	}
	for uid, n := range top {
		c.Restarts += int(max(n-base[uid], 0))
	}
	im := ImpactOf(tl.Series, step, at, end)
	if replaced.IsZero() {
		c.Kept = !im.Stalled && !im.Restarted
		return c
	}
	c.Replaced, c.Detection = true, replaced.Sub(at)
	after := replaced
	if im.Restarted {
		c.Recompute = time.Duration(im.StepsLost) * step
		for _, p := range tl.Series {
			if p.Rank == 0 && p.Resume && in(p.T) {
				after = maxTime(after, p.T)
				break
			}
		}
	}
	for _, p := range tl.Series {
		if p.Rank == 0 && !p.Resume && p.T.After(after) && p.T.Before(end) {
			c.Trained, c.Restart = true, p.T.Sub(replaced)
			break
		}
	}
	return c
}

// Floors is what no recovery beats on the cluster, measured at the run's
// start, the fastest arm's: a fresh pod (its image cached) to rank 0's
// first step, and a fresh trainer in a running container to it (every
// rank's pod and container, the later one: the group needs them all).
type Floors struct {
	Pod, Process time.Duration
}

// FloorsOf measures the floors from the arms' timelines.
func FloorsOf(tls ...Timeline) Floors {
	var f Floors
	for _, tl := range tls {
		var firstStep time.Time
		for _, p := range tl.Series {
			if p.Rank == 0 && !p.Resume {
				firstStep = p.T
				break
			}
		}
		if firstStep.IsZero() {
			continue
		}
		var created, started time.Time
		for _, p := range tl.Pods {
			if !p.Created.After(firstStep) {
				created = maxTime(created, p.Created)
			}
			if !p.Started.IsZero() && !p.Started.After(firstStep) {
				started = maxTime(started, p.Started)
			}
		}
		if !created.IsZero() && (f.Pod == 0 || firstStep.Sub(created) < f.Pod) {
			f.Pod = firstStep.Sub(created)
		}
		if !started.IsZero() && (f.Process == 0 || firstStep.Sub(started) < f.Process) {
			f.Process = firstStep.Sub(started)
		}
	}
	return f
}

// For is the floor of a kind: a rank fault needs a fresh trainer at the
// least, every other kind a fresh pod; a Kueue preemption also holds the
// quota for hold by design.
func (f Floors) For(k Kind, hold time.Duration) time.Duration {
	switch k {
	case RankKill, RankRaise:
		return f.Process
	case KueuePreempt:
		return hold + f.Pod
	}
	return f.Pod
}

func (c Cost) String() string {
	var s string
	switch {
	case c.Kept:
		s = "kept training"
	case !c.Replaced:
		s = "no replacement"
	case !c.Trained:
		s = fmt.Sprintf("%s + not training again", secs(c.Detection))
	default:
		s = fmt.Sprintf("%s + %s + %s = %s", secs(c.Detection), secs(c.Restart), secs(c.Recompute), secs(c.Total()))
	}
	if c.Restarts > 0 {
		var codes []string
		for _, e := range c.Exits {
			codes = append(codes, fmt.Sprint(e))
		}
		s += fmt.Sprintf("; restarts %d (exit %s)", c.Restarts, strings.Join(codes, ", "))
	}
	if c.BackOff > 0 {
		s += "; back-off " + secs(c.BackOff)
	}
	return s
}

// secs is a duration to a tenth of a second, "12.3s".
func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
