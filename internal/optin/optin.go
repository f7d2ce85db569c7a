// Package optin decides which namespaces and objects trainguard touches, and
// mirrors a namespace's opt-in annotation into a label, because webhook
// namespaceSelectors can only see labels.
package optin

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/policy"
)

// NamespaceEnabled reports whether objects in a namespace with these
// annotations are injected: opted in, or cluster-wide mode and not opted out.
func NamespaceEnabled(cfg *policy.Config, nsAnnotations map[string]string) bool {
	switch nsAnnotations[policy.AnnotationInject] {
	case policy.InjectEnabled:
		return true
	case policy.InjectDisabled:
		return false
	}
	return cfg.ClusterWide
}

// ObjectDisabled reports whether an object opted out.
func ObjectDisabled(annotations map[string]string) bool {
	return annotations[policy.AnnotationInject] == policy.InjectDisabled
}

// ObjectEnabled reports whether an object explicitly asked for injection.
func ObjectEnabled(annotations map[string]string) bool {
	return annotations[policy.AnnotationInject] == policy.InjectEnabled
}

// DesiredLabel returns the value the trainguard.io/inject label must have on
// a namespace with these annotations; ok is false when the label must be absent.
// Only the two valid values are mirrored: a bad value is the validating
// webhook's to refuse, not ours to spread.
func DesiredLabel(annotations map[string]string) (value string, ok bool) {
	switch v := annotations[policy.AnnotationInject]; v {
	case policy.InjectEnabled, policy.InjectDisabled:
		return v, true
	}
	return "", false
}

// MirrorLabel makes meta's trainguard.io/inject label match its annotation
// and reports whether it changed anything.
func MirrorLabel(meta *metav1.ObjectMeta) bool {
	want, ok := DesiredLabel(meta.Annotations)
	have, has := meta.Labels[policy.LabelInjectEnabled]
	switch {
	case ok && (!has || have != want):
		if meta.Labels == nil {
			meta.Labels = map[string]string{}
		}
		meta.Labels[policy.LabelInjectEnabled] = want
		return true
	case !ok && has:
		delete(meta.Labels, policy.LabelInjectEnabled)
		return true
	}
	return false
}

// Injects reports whether the webhook would inject an object with these
// annotations in namespace ns (whose annotations are nsAnnotations):
// the namespace is neither excluded nor trainguard's own (ownNamespace),
// it opted in (or cluster-wide mode and it did not opt out), and the object
// did not opt out. The rescheduler checks it in code before acting on a
// pod, because the trainguard.io/managed label alone is anyone's to set.
// why says what failed; it is empty when the object is injected.
func Injects(cfg *policy.Config, ownNamespace, ns string, nsAnnotations, objAnnotations map[string]string) (ok bool, why string) {
	switch {
	case ns == "":
		return false, "no namespace"
	case cfg.Excluded(ns) || ns == ownNamespace:
		return false, "namespace " + ns + " is excluded"
	case !NamespaceEnabled(cfg, nsAnnotations):
		return false, "namespace " + ns + " has not opted in"
	case ObjectDisabled(objAnnotations):
		return false, "the object opted out (" + policy.AnnotationInject + ": " + policy.InjectDisabled + ")"
	}
	return true, ""
}
