package rescheduler

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
)

// serviceAccountVolumePrefix names the token volume the ServiceAccount
// admission plugin adds; it adds it again to the replacement.
const serviceAccountVolumePrefix = "kube-api-access-"

// stashOf keeps what replacementFor needs of a bare pod trainguard read
// from the API server itself: the pod's identity, labels, annotations and
// spec. Nothing else of the pod (status, node, owner references) is kept.
func stashOf(pod *corev1.Pod) *Stash {
	return &Stash{
		Namespace:   pod.Namespace,
		Name:        pod.Name,
		UID:         pod.UID,
		Labels:      copyMap(pod.Labels),
		Annotations: copyMap(pod.Annotations),
		Spec:        *pod.Spec.DeepCopy(),
	}
}

// replacementFor builds the pod that replaces a deleted bare pod, in the
// stashed pod's own namespace (checked against the record's key when the
// stash was decoded): the same name, labels, annotations and spec, without
// the node and the fields admission plugins fill in (they fill them again
// and some refuse a pre-set value), plus the node anti-affinity to the
// job's bad nodes (podspec.Avoid). The anti-affinity is added here too, so the
// replacement avoids the nodes even when the pod webhook is down or has
// failurePolicy Ignore. The replacement goes through admission like any pod
// (Pod Security, quotas, trainguard's own webhook).
func replacementFor(s *Stash, avoid podspec.Avoid) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.Name,
			Namespace:   s.Namespace,
			Labels:      copyMap(s.Labels),
			Annotations: copyMap(s.Annotations),
		},
		Spec: *s.Spec.DeepCopy(),
	}
	delete(p.Annotations, contract.AnnotationDecision)
	spec := &p.Spec
	spec.NodeName = ""
	spec.EphemeralContainers = nil
	spec.Priority = nil
	spec.PreemptionPolicy = nil
	spec.Overhead = nil
	dropServiceAccountToken(spec)
	avoid.Apply(spec)
	return p
}

// notRecreatable is recordBadNode's answer for a bare pod unrecreatable
// refuses: the decision becomes "no action", reported once.
type notRecreatable string

func (n notRecreatable) Error() string { return string(n) }

// unrecreatable says why the chart's ValidatingAdmissionPolicy would refuse
// trainguard's account the replacement of this bare pod, or "" when it
// would not. The policy (charts/trainguard/templates/admissionpolicy.yaml)
// holds what the account creates to its marker and to Pod Security's
// baseline whatever the namespace enforces (unconfined lists the latter). Checked before the eviction, so such a pod stays
// where it is, with an Event, instead of being evicted and never recreated.
// It judges the replacement itself (replacementFor), which drops what a
// replacement never carries: the node, ephemeral containers. (The policy's
// ServiceAccount list is the chart's; a refusal there still ends in
// BarePodRecreateFailed.)
func unrecreatable(s *Stash) string {
	var why []string
	if s.Labels[contract.LabelManaged] != "true" || !contract.Injected(s.Annotations) {
		why = append(why, "it lacks trainguard's marker ("+contract.LabelManaged+" label, "+contract.AnnotationInjected+" annotation)")
	}
	r := replacementFor(s, podspec.Avoid{})
	why = append(why, unconfined(r.Annotations, &r.Spec)...)
	if len(why) == 0 {
		return ""
	}
	return "trainguard may not recreate this bare pod (" + strings.Join(why, "; ") +
		"), so it is not moved: trainguard's admission policy lets its account create only marked pods that Pod Security's " +
		"baseline admits; give it a controller (a Job or a training operator) to have it rescheduled"
}

// Unrecreatable is unrecreatable for a bare pod as the API server returns
// it; test/chartapply holds it, and Replacement, to the chart's policy.
func Unrecreatable(pod *corev1.Pod) string { return unrecreatable(stashOf(pod)) }

// Replacement is the pod trainguard would create for a bare pod as the API
// server returns it (avoiding no node), for test/chartapply.
func Replacement(pod *corev1.Pod) *corev1.Pod { return replacementFor(stashOf(pod), podspec.Avoid{}) }

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
