// Package goodput measures the effective training time ratio (ETTR) of one
// training job under a seeded chaos schedule, in three arms side by side:
// trainguard, plain Kubernetes and Kueue's failure recovery
// (docs/goodput.md). This file is the schedule: which disruption, when and
// where, a pure function of the seed, so a run can be repeated.
package goodput

import (
	"fmt"
	"math/rand"
	"strings"
	"time"
)

// Kind is one kind of disruption.
type Kind string

// The disruptions of the goodput benchmark (docs/goodput.md). Node kinds hit
// a node (every arm with a pod there meets it); job kinds hit one rank of
// every arm's job at once.
const (
	Drain        Kind = "drain"                // kubectl drain, uncordoned at the next event
	Crash        Kind = "node-crash"           // the node hook's crash, restored at the next event
	Partition    Kind = "partition"            // the node hook's partition (kubelet silent), healed at the next event
	KueuePreempt Kind = "kueue-preemption"     // a higher-priority job in each arm's queue
	SchedPreempt Kind = "scheduler-preemption" // a higher-priority pod that needs the node's CPU
	RankKill     Kind = "rank-kill"            // SIGKILL of one rank's trainer (137, as the OOM killer)
	RankRaise    Kind = "rank-exception"       // a Python exception raised in one rank's trainer
	// WarnedCrash: the node announces its maintenance (MaintenancePlanned,
	// as a node agent would) WarnLead before the node crash. Not among
	// Kinds, so every seed's schedule stays as it was: ask for it by name.
	WarnedCrash Kind = "warned-crash"
)

// Kinds is every kind, in the order the short form's permutation starts from.
var Kinds = []Kind{Drain, Crash, Partition, KueuePreempt, SchedPreempt, RankKill, RankRaise}

// NodeKind says whether the disruption hits a node rather than a job.
func (k Kind) NodeKind() bool {
	return k == Drain || k == Crash || k == Partition || k == SchedPreempt || k == WarnedCrash
}

// byName are the kinds ParseKinds knows: every kind of Kinds and those
// asked for by name only.
var byName = append(append([]Kind(nil), Kinds...), WarnedCrash)

// WarnLead is how long before a warned crash its node warns: 5 to 30 s,
// seeded through the event's time.
func (e Event) WarnLead() time.Duration {
	return 5*time.Second + time.Duration(int64(e.At/time.Second)%26)*time.Second
}

// Event is one disruption of the schedule.
type Event struct {
	At   time.Duration // after the schedule's start (every arm training)
	Kind Kind
	// Slot picks the target: for a node kind, the worker node preferred when
	// several host the same number of the arms' pods (index into the sorted
	// worker nodes, modulo their number); for a job kind, the rank.
	Slot int
}

func (e Event) String() string {
	target := fmt.Sprintf("node slot %d", e.Slot)
	switch {
	case e.Kind == KueuePreempt:
		target = "every arm's queue"
	case !e.Kind.NodeKind():
		target = fmt.Sprintf("rank %d", e.Slot)
	}
	return fmt.Sprintf("%8s  %-20s  %s", e.At.Round(time.Second), e.Kind, target)
}

// Schedule is a seeded chaos schedule: one disruption per interval, each at a
// seeded time inside its interval (never in its last quarter, so the arms
// have time to recover before the next), of a seeded kind and target. The
// first interval is left undisturbed (the warm-up). Same arguments, same
// schedule.
func Schedule(seed int64, duration, interval time.Duration, kinds []Kind) ([]Event, error) {
	if interval < 10*time.Second {
		return nil, fmt.Errorf("interval %s: must be at least 10s", interval)
	}
	if duration < 2*interval {
		return nil, fmt.Errorf("duration %s: must be at least two intervals (%s)", duration, 2*interval)
	}
	if len(kinds) == 0 {
		kinds = Kinds
	}
	r := rand.New(rand.NewSource(seed))
	var evs []Event
	for start := interval; start+interval <= duration; start += interval {
		jitter := time.Duration(r.Int63n(int64(interval / 4)))
		evs = append(evs, Event{
			At:   (start + jitter).Truncate(time.Second),
			Kind: kinds[r.Intn(len(kinds))],
			Slot: r.Intn(2),
		})
	}
	return evs, nil
}

// ShortKinds are the short form's disruptions (make e2e): the node crash,
// the one kind that separates the arms on a small cluster. On the local
// cluster the others cost every arm about the same or measure the local
// hook (docs/goodput.md, "In make e2e"): the rank faults restart in place
// in every arm alike, a Kueue or scheduler preemption holds the quota or
// the node for a third of the interval in every arm, a drain stalled every
// arm alike, and the partition (its own e2e scenario) would add minutes
// to the longest lane of make e2e. The long form has every kind; each
// kind also has its own e2e scenario.
var ShortKinds = []Kind{Crash}

// ShortSeed is the short form's seed (the crash's slot among equally hit
// nodes). The dead node stays dead to the end of the run (the 5-minute
// repair), as a dead machine waits for a person.
const ShortSeed = 3

// Short is the short form: every one of kinds (nil: every kind) exactly
// once, in a seeded order, one per interval after a first undisturbed
// interval.
func Short(seed int64, interval time.Duration, kinds []Kind) []Event {
	if len(kinds) == 0 {
		kinds = Kinds
	}
	r := rand.New(rand.NewSource(seed))
	kinds = append([]Kind(nil), kinds...)
	r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	evs := make([]Event, len(kinds))
	for i, k := range kinds {
		evs[i] = Event{At: time.Duration(i+1) * interval, Kind: k, Slot: r.Intn(2)}
	}
	return evs
}

// Format prints a schedule, one event a line, with its seed.
func Format(seed int64, evs []Event) string {
	var b strings.Builder
	plural := "s"
	if len(evs) == 1 {
		plural = ""
	}
	fmt.Fprintf(&b, "chaos schedule, seed %d, %d disruption%s:\n", seed, len(evs), plural)
	for i, e := range evs {
		fmt.Fprintf(&b, "  %2d %s\n", i+1, e)
	}
	return b.String()
}

// ParseKinds reads a comma-separated list of kinds ("" is every kind).
func ParseKinds(s string) ([]Kind, error) {
	if strings.TrimSpace(s) == "" {
		return Kinds, nil
	}
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		known := false
		for _, c := range byName {
			known = known || c == k
		}
		if !known {
			return nil, fmt.Errorf("unknown disruption kind %q (one of %v)", k, byName)
		}
		out = append(out, k)
	}
	return out, nil
}
