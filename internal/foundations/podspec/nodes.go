package podspec

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// HostnameKey is the node label anti-affinity matches on.
const HostnameKey = "kubernetes.io/hostname"

// RequireNotOnNodes adds a required node anti-affinity to nodes. It is
// ANDed into every existing node-selector term, so it only ever narrows
// where the pod may run, never widens what the user allowed. A term that
// already has a hostname NotIn expression gets the nodes merged into it.
// The pod mutator (mutators.AvoidNodes) and the rescheduler, for the bare
// pods it recreates, both use it, so both paths write the same expression.
func RequireNotOnNodes(spec *corev1.PodSpec, nodes []string) bool {
	if len(nodes) == 0 {
		return false
	}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	sel := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(sel.NodeSelectorTerms) == 0 {
		sel.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range sel.NodeSelectorTerms {
		term := &sel.NodeSelectorTerms[i]
		term.MatchExpressions = excludeNodes(term.MatchExpressions, nodes)
	}
	return true
}

// excludeNodes merges nodes into the first hostname NotIn expression, or
// appends one. Values stay sorted so a re-run produces the same list.
func excludeNodes(exprs []corev1.NodeSelectorRequirement, nodes []string) []corev1.NodeSelectorRequirement {
	for i := range exprs {
		e := &exprs[i]
		if e.Key != HostnameKey || e.Operator != corev1.NodeSelectorOpNotIn {
			continue
		}
		if merged := mergeSorted(e.Values, nodes); len(merged) != len(e.Values) {
			e.Values = merged
		}
		return exprs
	}
	return append(exprs, corev1.NodeSelectorRequirement{Key: HostnameKey, Operator: corev1.NodeSelectorOpNotIn, Values: mergeSorted(nil, nodes)})
}

func mergeSorted(have, add []string) []string {
	seen := make(map[string]bool, len(have)+len(add))
	out := make([]string, 0, len(have)+len(add))
	for _, list := range [][]string{have, add} {
		for _, n := range list {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	if len(out) == len(have) {
		return have
	}
	sort.Strings(out)
	return out
}
