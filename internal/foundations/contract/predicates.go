package contract

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The questions every component asks about an object. Each is answered
// here once; the webhook, `trainguard inject`, the validators and the
// rescheduler call these instead of reading the keys themselves.

// NamespaceEnabled reports whether objects in a namespace with these
// annotations are injected: opted in, or cluster-wide mode and not opted out.
func NamespaceEnabled(clusterWide bool, nsAnnotations map[string]string) bool {
	switch nsAnnotations[AnnotationInject] {
	case InjectEnabled:
		return true
	case InjectDisabled:
		return false
	}
	return clusterWide
}

// OptedOut reports whether an object opted out with trainguard.io/inject=disabled.
// Its policy is then never applied, so neither are the checks that compare
// the object with that policy.
func OptedOut(annotations map[string]string) bool {
	return annotations[AnnotationInject] == InjectDisabled
}

// DesiredInjectLabel returns the value the trainguard.io/inject label must
// have on a namespace with these annotations (webhook namespaceSelectors
// see only labels); ok is false when the label must be absent. Only the two
// valid values are mirrored: a bad value is the validating webhook's to
// refuse, not ours to spread.
func DesiredInjectLabel(annotations map[string]string) (value string, ok bool) {
	switch v := annotations[AnnotationInject]; v {
	case InjectEnabled, InjectDisabled:
		return v, true
	}
	return "", false
}

// MirrorInjectLabel makes meta's trainguard.io/inject label match its
// annotation and reports whether it changed anything. The namespace
// mutating webhook calls it at admission, the optin controller for
// namespaces annotated while trainguard was down.
func MirrorInjectLabel(meta *metav1.ObjectMeta) bool {
	want, ok := DesiredInjectLabel(meta.Annotations)
	have, has := meta.Labels[LabelInjectEnabled]
	switch {
	case ok && (!has || have != want):
		if meta.Labels == nil {
			meta.Labels = map[string]string{}
		}
		meta.Labels[LabelInjectEnabled] = want
		return true
	case !ok && has:
		delete(meta.Labels, LabelInjectEnabled)
		return true
	}
	return false
}

// Audited reports whether objects in a namespace with these annotations
// are admitted unchanged and only reported on: the namespace's
// trainguard.io/admission-mode when valid, else the configuration's mode.
func Audited(configMode string, nsAnnotations map[string]string) bool {
	if m, err := ParseAdmissionMode(nsAnnotations[AnnotationAdmissionMode]); err == nil {
		return m == ModeAudit
	}
	return configMode == ModeAudit
}

// OptedIn reports whether an object explicitly asked for injection.
func OptedIn(annotations map[string]string) bool {
	return annotations[AnnotationInject] == InjectEnabled
}

// Injected reports whether trainguard already injected an object or pod
// template: it carries the marker annotation.
func Injected(annotations map[string]string) bool {
	_, ok := annotations[AnnotationInjected]
	return ok
}

// TrainingContainer returns the index of the container trainguard injects
// into: the first whose name is in names, in the order of names, else the
// first container; -1 for a spec without containers.
func TrainingContainer(spec *corev1.PodSpec, names []string) int {
	if spec == nil || len(spec.Containers) == 0 {
		return -1
	}
	if i := namedTrainingContainer(spec, names); i >= 0 {
		return i
	}
	return 0
}

// HasNamedTrainingContainer reports whether a container carries one of the
// training container names; for pods without a job behind them that is what
// marks them as training pods.
func HasNamedTrainingContainer(spec *corev1.PodSpec, names []string) bool {
	return namedTrainingContainer(spec, names) >= 0
}

func namedTrainingContainer(spec *corev1.PodSpec, names []string) int {
	for _, name := range names {
		for i := range spec.Containers {
			if spec.Containers[i].Name == name {
				return i
			}
		}
	}
	return -1
}
