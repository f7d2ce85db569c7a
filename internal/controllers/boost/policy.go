// Package boost tells Kueue what each training job has at risk. Kueue picks
// preemption victims by priority, then by admission time (newest first); it
// cannot see checkpoints. With Kueue's PriorityBoost feature gate (KEP-7990,
// alpha since v0.17), a Workload's kueue.x-k8s.io/priority-boost annotation
// adds to its effective priority, in victim ordering as everywhere else.
// This package computes each admitted training job's work at risk (what a
// preemption now would cost it) and writes a bounded boost from it, so that
// among jobs of one WorkloadPriorityClass Kueue preempts the one that loses
// least.
package boost

import (
	"math"
	"time"
)

// Risk is what a preemption right now would cost one job.
type Risk struct {
	// Known is false when trainguard could not read the trainer's status
	// (no SDK trainer listening in any running pod, or its status endpoint
	// unreachable): nothing says a termination checkpoint would happen.
	Known bool
	// SecondsSinceCommit and StepsSinceCommit: since the job's last
	// committed checkpoint (HasCommit false: it never committed one).
	SecondsSinceCommit float64
	StepsSinceCommit   int64
	HasCommit          bool
	// AckSeconds is the expected preStop→ack time: the longer of the last
	// measured one (the agent's outcome) and the trainer's last save.
	AckSeconds float64
	// GraceSeconds is the pod's terminationGracePeriodSeconds.
	GraceSeconds float64
}

// ckptMargin is the share of the grace period a termination checkpoint may
// take and still count as certain: the rest absorbs a step in flight and a
// slower disk than last time.
const ckptMargin = 0.5

// CheckpointFits says whether a termination checkpoint is expected to
// succeed within the grace period: a trainer listens and its last save took
// at most half the grace period.
func (r Risk) CheckpointFits() bool {
	return r.Known && r.GraceSeconds > 0 && r.AckSeconds <= ckptMargin*r.GraceSeconds
}

// SecondsAtRisk is the training time a preemption now would lose: none
// when the termination checkpoint fits, else everything since the last
// commit (all of it, +Inf, when there is none or nothing is known).
func (r Risk) SecondsAtRisk() float64 {
	switch {
	case r.CheckpointFits():
		return 0
	case !r.Known || !r.HasCommit:
		return math.Inf(1)
	default:
		return max(r.SecondsSinceCommit, 0)
	}
}

// Params are the policy's knobs.
type Params struct {
	// Enabled: Kueue runs with the PriorityBoost gate (configuration
	// priorityBoost.enabled). Without it Kueue ignores the annotation, and
	// trainguard writes nothing.
	Enabled bool
	// MaxBoost bounds every boost (priorityBoost.maxBoost).
	MaxBoost int32
	// SaturateAfter: work at risk of this long or more gets MaxBoost;
	// less gets a proportional share.
	SaturateAfter time.Duration
	// Hysteresis: a change smaller than this is not written.
	Hysteresis int32
	// MinInterval: at most one change per Workload per this long.
	MinInterval time.Duration
}

// Bound is the highest boost a job may get: MaxBoost, and strictly below
// the next WorkloadPriorityClass above the job's own priority (nextClass
// nil: there is none), so that a job of a higher class always still
// preempts a boosted one (Kueue compares effective priorities, and
// LowerPriority needs the preemptor strictly higher).
func Bound(maxBoost, priority int32, nextClass *int32) int32 {
	b := max(maxBoost, 0)
	if nextClass != nil {
		gap := int64(*nextClass) - int64(priority) - 1
		if gap < int64(b) {
			b = int32(max(gap, 0))
		}
	}
	return b
}

// Target is the boost the work at risk asks for, before hysteresis and rate
// limit: 0 for a job whose termination checkpoint fits, bound for one that
// would lose SaturateAfter or more, proportional in between.
func Target(r Risk, p Params, bound int32) int32 {
	s := r.SecondsAtRisk()
	if s <= 0 || bound <= 0 {
		return 0
	}
	sat := p.SaturateAfter.Seconds()
	if sat <= 0 || s >= sat {
		return bound
	}
	return int32(math.Ceil(float64(bound) * s / sat))
}

// State is what was written last on one Workload.
type State struct {
	Boost   int32     // the annotation's value now (0: absent)
	Changed time.Time // when trainguard last changed it (zero: never)
}

// Decide returns the boost to write and whether to write it. A job that is
// not admitted (pending, evicted, finished) loses its boost at once, rate
// limit or not: a pending job with a boost could preempt an admitted job of
// its own class. Otherwise the boost moves only by at least Hysteresis (or
// to exactly 0 or the bound, so it settles at both ends) and at most once
// per MinInterval.
func Decide(p Params, admitted bool, r Risk, bound int32, cur State, now time.Time) (int32, bool) {
	if !p.Enabled {
		return cur.Boost, false
	}
	if !admitted {
		return 0, cur.Boost != 0
	}
	if cur.Boost > bound || cur.Boost < 0 {
		return min(max(cur.Boost, 0), bound), true // a lowered bound or a foreign value applies at once
	}
	want := Target(r, p, bound)
	if want == cur.Boost {
		return cur.Boost, false
	}
	diff := want - cur.Boost
	if diff < 0 {
		diff = -diff
	}
	if diff < p.Hysteresis && want != 0 && want != bound {
		return cur.Boost, false
	}
	if !cur.Changed.IsZero() && now.Sub(cur.Changed) < p.MinInterval {
		return cur.Boost, false
	}
	return want, true
}
