package podspec

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Avoid is how a new pod avoids the nodes recorded as bad for its job.
// Preferred nodes failed the job once: the scheduler places the pod
// elsewhere when it can, and on them when nothing else fits, so a record
// never leaves a job with nowhere to run. Required nodes failed the job
// again, with a pod placed there after the first failure: the pod must not
// land on them (docs/rescheduler.md, "Which nodes a job avoids").
type Avoid struct {
	Required, Preferred []string
}

// Empty says nothing is avoided.
func (a Avoid) Empty() bool { return len(a.Required) == 0 && len(a.Preferred) == 0 }

// Apply writes the avoidance into spec: RequireNotOnNodes for Required,
// PreferNotOnNodes for the Preferred nodes not already required. It
// reports whether spec changed.
func (a Avoid) Apply(spec *corev1.PodSpec) bool {
	req := RequireNotOnNodes(spec, a.Required)
	pref := PreferNotOnNodes(spec, without(a.Preferred, a.Required))
	return req || pref
}

func without(nodes, drop []string) []string {
	var out []string
	for _, n := range nodes {
		if !slices.Contains(drop, n) {
			out = append(out, n)
		}
	}
	return out
}

// NodeAvoider tells the pod mutator which nodes a new pod should not land
// on: nodes the rescheduler recorded as bad for the pod's job, not yet
// expired. The pod webhook calls it on every pod CREATE, so implementations
// must read from an informer cache, never the API server directly.
type NodeAvoider interface {
	AvoidNodes(ctx context.Context, pod *corev1.Pod) (Avoid, error)
	// InPlaceStopped says the rescheduler stopped the in-place restarts of
	// the pod's job (they reached its cap): the pod gets no restart rules.
	// Only trainguard writes what it reads, so nothing a tenant writes can
	// turn the rules back on.
	InPlaceStopped(ctx context.Context, pod *corev1.Pod) (bool, error)
}
