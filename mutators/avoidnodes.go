package mutators

import "github.com/trainguard/trainguard/internal/foundations/podspec"

// AvoidNodes adds a required node anti-affinity to nodes. It is ANDed into
// every existing node-selector term, so it only ever narrows where the pod
// may run, never widens what the user allowed. A term that already has a
// hostname NotIn expression gets the nodes merged into it, the same way the
// rescheduler writes it when it recreates a bare pod, so both paths converge.
func AvoidNodes(t *Target, nodes []string) bool {
	return podspec.RequireNotOnNodes(t.Spec, nodes)
}
