package mutators

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// hostnameKey is the node label anti-affinity matches on.
const hostnameKey = "kubernetes.io/hostname"

// AvoidNodes adds a required node anti-affinity to nodes. It is ANDed into
// every existing node-selector term, so it only ever narrows where the pod
// may run, never widens what the user allowed.
func AvoidNodes(t *Target, nodes []string) bool {
	if len(nodes) == 0 {
		return false
	}
	nodes = append([]string(nil), nodes...)
	sort.Strings(nodes)
	req := corev1.NodeSelectorRequirement{Key: hostnameKey, Operator: corev1.NodeSelectorOpNotIn, Values: nodes}
	if t.Spec.Affinity == nil {
		t.Spec.Affinity = &corev1.Affinity{}
	}
	if t.Spec.Affinity.NodeAffinity == nil {
		t.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := t.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	sel := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(sel.NodeSelectorTerms) == 0 {
		sel.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range sel.NodeSelectorTerms {
		term := &sel.NodeSelectorTerms[i]
		if !excludesAll(term.MatchExpressions, nodes) {
			term.MatchExpressions = append(term.MatchExpressions, req)
		}
	}
	return true
}

// excludesAll reports whether some hostname NotIn expression already covers nodes.
func excludesAll(exprs []corev1.NodeSelectorRequirement, nodes []string) bool {
	for _, e := range exprs {
		if e.Key != hostnameKey || e.Operator != corev1.NodeSelectorOpNotIn {
			continue
		}
		have := map[string]bool{}
		for _, v := range e.Values {
			have[v] = true
		}
		all := true
		for _, n := range nodes {
			all = all && have[n]
		}
		if all {
			return true
		}
	}
	return false
}
