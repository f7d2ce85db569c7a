// Package optin mirrors a namespace's opt-in annotation into a label,
// because webhook namespaceSelectors can only see labels. Whether a
// namespace or object is injected is contract.NamespaceEnabled / OptedOut.
package optin

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/config"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// DesiredLabel returns the value the trainguard.io/inject label must have on
// a namespace with these annotations; ok is false when the label must be absent.
// Only the two valid values are mirrored: a bad value is the validating
// webhook's to refuse, not ours to spread.
func DesiredLabel(annotations map[string]string) (value string, ok bool) {
	switch v := annotations[contract.AnnotationInject]; v {
	case contract.InjectEnabled, contract.InjectDisabled:
		return v, true
	}
	return "", false
}

// MirrorLabel makes meta's trainguard.io/inject label match its annotation
// and reports whether it changed anything.
func MirrorLabel(meta *metav1.ObjectMeta) bool {
	want, ok := DesiredLabel(meta.Annotations)
	have, has := meta.Labels[contract.LabelInjectEnabled]
	switch {
	case ok && (!has || have != want):
		if meta.Labels == nil {
			meta.Labels = map[string]string{}
		}
		meta.Labels[contract.LabelInjectEnabled] = want
		return true
	case !ok && has:
		delete(meta.Labels, contract.LabelInjectEnabled)
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
func Injects(cfg *config.Config, ownNamespace, ns string, nsAnnotations, objAnnotations map[string]string) (ok bool, why string) {
	switch {
	case ns == "":
		return false, "no namespace"
	case cfg.Excluded(ns) || ns == ownNamespace:
		return false, "namespace " + ns + " is excluded"
	case !contract.NamespaceEnabled(cfg.ClusterWide, nsAnnotations):
		return false, "namespace " + ns + " has not opted in"
	case contract.OptedOut(objAnnotations):
		return false, "the object opted out (" + contract.AnnotationInject + ": " + contract.InjectDisabled + ")"
	}
	return true, ""
}
