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
	na := nodeAffinity(spec)
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

// AvoidWeight is the weight of the preferred anti-affinity to nodes that
// failed a job once: the most a term can have, so the node is the
// scheduler's last choice among those that fit, not a forbidden one.
const AvoidWeight = 100

// PreferNotOnNodes adds a preferred node anti-affinity to nodes: a term of
// weight AvoidWeight whose only expression is hostname NotIn nodes, so
// every other node scores higher. A term of that shape already there (a
// previous admission's, or the user's) gets the nodes merged into it, so
// a re-run changes nothing. Preferences never make a pod unschedulable.
func PreferNotOnNodes(spec *corev1.PodSpec, nodes []string) bool {
	if len(nodes) == 0 {
		return false
	}
	na := nodeAffinity(spec)
	for i := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		term := &na.PreferredDuringSchedulingIgnoredDuringExecution[i]
		exprs := term.Preference.MatchExpressions
		if len(exprs) != 1 || len(term.Preference.MatchFields) != 0 || exprs[0].Key != HostnameKey || exprs[0].Operator != corev1.NodeSelectorOpNotIn {
			continue
		}
		merged := mergeSorted(exprs[0].Values, nodes)
		if len(merged) == len(exprs[0].Values) {
			return false
		}
		exprs[0].Values = merged
		return true
	}
	na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, corev1.PreferredSchedulingTerm{
		Weight:     AvoidWeight,
		Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{notOnNodes(nodes)}},
	})
	return true
}

// nodeAffinity is spec's node affinity, made where the pod has none.
func nodeAffinity(spec *corev1.PodSpec) *corev1.NodeAffinity {
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	return spec.Affinity.NodeAffinity
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
	return append(exprs, notOnNodes(nodes))
}

// notOnNodes is the expression both anti-affinities write: hostname NotIn
// nodes, sorted and without repeats.
func notOnNodes(nodes []string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: HostnameKey, Operator: corev1.NodeSelectorOpNotIn, Values: mergeSorted(nil, nodes)}
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
