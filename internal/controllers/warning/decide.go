package warning

import (
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/jobs"
)

// The decision is pure, like the rescheduler's Decide: which node warns,
// which jobs get a request and whether the brake holds, from counts, the
// jobs' last requests and the settings. No clock, client, lock or metric.

// Rules are the warnings listened to (nodeWarnings.conditions and .taints).
type Rules struct {
	conditions map[corev1.NodeConditionType]corev1.ConditionStatus
	taints     []string
}

// NewRules reads the settings' lists; an entry that does not parse is an
// error naming it (Validate refuses it first for a loaded file).
func NewRules(w configv1alpha1.NodeWarningsConfig) (Rules, error) {
	r := Rules{conditions: map[corev1.NodeConditionType]corev1.ConditionStatus{}, taints: slices.Clone(w.Taints)}
	for i, c := range w.Conditions {
		typ, status, err := configv1alpha1.ParseWarningCondition(c)
		if err != nil {
			return Rules{}, fmt.Errorf("nodeWarnings.conditions[%d]: %w", i, err)
		}
		r.conditions[typ] = status
	}
	return r, nil
}

// Warnings returns what on the node warns, sorted: "Type=Status" for a
// condition, "taint Key" for a taint. Empty: the node does not warn.
func (r Rules) Warnings(n *corev1.Node) []string {
	var out []string
	for _, c := range n.Status.Conditions {
		if want, ok := r.conditions[c.Type]; ok && want == c.Status {
			out = append(out, string(c.Type)+"="+string(c.Status))
		}
	}
	for _, t := range n.Spec.Taints {
		if slices.Contains(r.taints, t.Key) {
			out = append(out, "taint "+t.Key)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Limits are the brake's thresholds and the per-job interval.
type Limits struct {
	// MinInterval: at most one request per job this often.
	MinInterval time.Duration
	// BrakeThreshold and BrakeMinNodes: the brake engages when more than
	// BrakeThreshold of the carriers warn, and at least BrakeMinNodes.
	BrakeThreshold float64
	BrakeMinNodes  int
}

// LimitsFrom reads the settings.
func LimitsFrom(w configv1alpha1.NodeWarningsConfig) Limits {
	return Limits{MinInterval: w.MinInterval.Duration, BrakeThreshold: w.BrakeThreshold, BrakeMinNodes: w.BrakeMinNodes}
}

// Input is one warning node's situation.
type Input struct {
	Now time.Time
	// Jobs are the jobs with a rank on the warning node.
	Jobs []jobs.Key
	// Carriers are the nodes carrying managed pods; Warning, how many of
	// them warn now (the node itself included).
	Carriers, Warning int
	// LastRequest is when each job was last asked.
	LastRequest map[jobs.Key]time.Time
	Limits      Limits
}

// Brake is the brake as judged.
type Brake struct {
	On  bool
	Why string
}

// Skip is a job not asked, and why.
type Skip struct {
	Job jobs.Key
	// Reason is SkipInterval or SkipBrake (the metric's label).
	Reason string
	// Until: an interval skip's end.
	Until time.Time
}

// Reasons a job is not asked.
const (
	SkipInterval = "interval"
	SkipBrake    = "brake"
)

// Plan is what to do about one warning node.
type Plan struct {
	Brake Brake
	// Ask are the jobs to ask, in order.
	Ask  []jobs.Key
	Skip []Skip
}

// Decide plans one warning node: with the brake engaged nobody is asked;
// else each job not asked within the interval is asked once.
func Decide(in Input) Plan {
	var p Plan
	p.Brake = judgeBrake(in.Warning, in.Carriers, in.Limits)
	keys := slices.Clone(in.Jobs)
	slices.SortFunc(keys, func(a, b jobs.Key) int {
		if a.String() < b.String() {
			return -1
		}
		if a.String() > b.String() {
			return 1
		}
		return 0
	})
	keys = slices.Compact(keys)
	for _, k := range keys {
		switch last, ok := in.LastRequest[k]; {
		case p.Brake.On:
			p.Skip = append(p.Skip, Skip{Job: k, Reason: SkipBrake})
		case ok && in.Now.Before(last.Add(in.Limits.MinInterval)):
			p.Skip = append(p.Skip, Skip{Job: k, Reason: SkipInterval, Until: last.Add(in.Limits.MinInterval)})
		default:
			p.Ask = append(p.Ask, k)
		}
	}
	return p
}

// judgeBrake is the rescheduler's cluster brake applied to warnings: more
// than threshold of the carriers, and at least minNodes of them, is the
// warning source misbehaving (an agent, a bad rule), not the nodes.
func judgeBrake(warning, carriers int, l Limits) Brake {
	share := 0.0
	if carriers > 0 {
		share = float64(warning) / float64(carriers)
	}
	on := l.BrakeThreshold < 1 && warning >= l.BrakeMinNodes && share > l.BrakeThreshold
	return Brake{On: on, Why: fmt.Sprintf("%d of %d nodes carrying managed pods warn at once (threshold %.0f%%, at least %d)",
		warning, carriers, 100*l.BrakeThreshold, l.BrakeMinNodes)}
}

// Prune drops the requests older than the interval: they limit nothing
// any more, and the map must not grow with every job ever asked.
func Prune(last map[jobs.Key]time.Time, now time.Time, interval time.Duration) {
	for k, t := range last {
		if !now.Before(t.Add(interval)) {
			delete(last, k)
		}
	}
}

// maxTries bounds the pods of one job a request is tried on: any pod's
// trainer relays it to the job's rank 0, so a few that do not answer
// (a dying node, a pod still starting) are enough to give up on.
const maxTries = 3

// Candidates are the pods of one job a request may go to, best first: a
// running pod with its own IP (never a host-network pod's, which is the
// node's), not being deleted; pods off the warning nodes first (the
// warning node may go any moment), then by name. At most maxTries.
func Candidates(pods []*corev1.Pod, warning func(node string) bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && !p.Spec.HostNetwork && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b *corev1.Pod) int {
		wa, wb := warning(a.Spec.NodeName), warning(b.Spec.NodeName)
		switch {
		case wa != wb && !wa:
			return -1
		case wa != wb:
			return 1
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out[:min(len(out), maxTries)]
}
