package rescheduler

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hostnameLabel is the node label the anti-affinity matches.
const hostnameLabel = "kubernetes.io/hostname"

// serviceAccountVolumePrefix names the token volume the ServiceAccount
// admission plugin adds; it adds it again to the replacement.
const serviceAccountVolumePrefix = "kube-api-access-"

// replacementFor builds the pod that replaces a deleted bare pod: the same
// name, labels, annotations and spec, without the node, the status, and the
// fields admission plugins fill in (they fill them again and some refuse a
// pre-set value), plus a required node anti-affinity to the job's bad nodes.
// The anti-affinity is added here too, so the replacement avoids the nodes
// even when the pod webhook is down or has failurePolicy Ignore.
func replacementFor(old *corev1.Pod, avoid []string) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            old.Name,
			Namespace:       old.Namespace,
			Labels:          copyMap(old.Labels),
			Annotations:     copyMap(old.Annotations),
			OwnerReferences: old.OwnerReferences,
		},
		Spec: *old.Spec.DeepCopy(),
	}
	delete(p.Annotations, AnnotationDecision)
	spec := &p.Spec
	spec.NodeName = ""
	spec.EphemeralContainers = nil
	spec.Priority = nil
	spec.PreemptionPolicy = nil
	spec.Overhead = nil
	dropServiceAccountToken(spec)
	requireNotOnNodes(spec, avoid)
	return p
}

func dropServiceAccountToken(spec *corev1.PodSpec) {
	var dropped []string
	vols := spec.Volumes[:0]
	for _, v := range spec.Volumes {
		if strings.HasPrefix(v.Name, serviceAccountVolumePrefix) && v.Projected != nil {
			dropped = append(dropped, v.Name)
			continue
		}
		vols = append(vols, v)
	}
	spec.Volumes = vols
	if len(dropped) == 0 {
		return
	}
	isDropped := func(name string) bool {
		for _, d := range dropped {
			if d == name {
				return true
			}
		}
		return false
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			mounts := cs[i].VolumeMounts[:0]
			for _, m := range cs[i].VolumeMounts {
				if !isDropped(m.Name) {
					mounts = append(mounts, m)
				}
			}
			cs[i].VolumeMounts = mounts
		}
	}
}

// requireNotOnNodes ANDs `kubernetes.io/hostname NotIn nodes` into every
// required node selector term, the same shape the pod webhook adds. An
// existing hostname NotIn expression is extended (union), so running this
// and the webhook both gives one expression, not two.
func requireNotOnNodes(spec *corev1.PodSpec, nodes []string) {
	if len(nodes) == 0 {
		return
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
	req := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(req.NodeSelectorTerms) == 0 {
		req.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range req.NodeSelectorTerms {
		req.NodeSelectorTerms[i].MatchExpressions = mergeNotIn(req.NodeSelectorTerms[i].MatchExpressions, nodes)
	}
}

func mergeNotIn(exprs []corev1.NodeSelectorRequirement, nodes []string) []corev1.NodeSelectorRequirement {
	for i := range exprs {
		if exprs[i].Key == hostnameLabel && exprs[i].Operator == corev1.NodeSelectorOpNotIn {
			exprs[i].Values = union(exprs[i].Values, nodes)
			return exprs
		}
	}
	return append(exprs, corev1.NodeSelectorRequirement{Key: hostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: union(nil, nodes)})
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string{}, a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
