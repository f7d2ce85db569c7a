package mutators

import "github.com/trainguard/trainguard/internal/foundations/podspec"

// AvoidNodes adds the node anti-affinity of the job's bad nodes: required
// for nodes that failed the job again, preferred for nodes that failed it
// once (podspec.Avoid). The required part is ANDed into every existing
// node-selector term, so it only ever narrows where the pod may run, never
// widens what the user allowed; both parts merge into expressions already
// there, the same way the rescheduler writes them when it recreates a bare
// pod, so both paths converge.
func AvoidNodes(t *Target, avoid podspec.Avoid) bool {
	return avoid.Apply(t.Spec)
}
