package mutators

import (
	"slices"
	"strings"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// injectTemplate runs every enabled injection of the registry
// (Injections) on t, in its order, labels it as managed and
// records what was applied in the marker annotation. It returns the names of
// the injections in place.
func injectTemplate(t *Target) []string {
	var applied []string
	for _, in := range Injections() {
		if in.Template != nil && t.Policy.Enabled(in.Name) && in.Template(t) {
			applied = append(applied, in.Name)
		}
	}
	setManaged(t)
	// Union with the existing marker: on reinvocation an injection already in
	// place (e.g. the GPU limit it set) looks like the user's own.
	Mark(t.Meta, applied)
	return Marked(t.Meta.Annotations)
}

// injectPerPod runs the injections decided per pod, in registry order.
func injectPerPod(t *Target, avoid podspec.Avoid) {
	for _, in := range Injections() {
		if in.Pod != nil && t.Policy.Enabled(in.Name) && in.Pod(t) {
			Mark(t.Meta, []string{in.Name})
		}
	}
	if t.Policy.Enabled(contract.InjectionAvoidNodes) && AvoidNodes(t, avoid) {
		Mark(t.Meta, []string{contract.InjectionAvoidNodes})
	}
}

// Marked returns the injections listed in an object's marker annotation.
func Marked(annotations map[string]string) []string {
	v, ok := annotations[contract.AnnotationInjected]
	if !ok || v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Mark writes the marker annotation on meta: the injections already
// listed there plus applied, in chain order, without duplicates. Jobs use it
// for the union of what their templates received.
func Mark(meta *metav1.ObjectMeta, applied []string) {
	seen := map[string]bool{}
	for _, a := range append(Marked(meta.Annotations), applied...) {
		seen[a] = true
	}
	var ordered []string
	for _, name := range Names() {
		if seen[name] {
			ordered = append(ordered, name)
		}
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[contract.AnnotationInjected] = strings.Join(ordered, ",")
}

// Unmark takes an injection off meta's marker annotation: it is no longer
// in place.
func Unmark(meta *metav1.ObjectMeta, name string) {
	marked := Marked(meta.Annotations)
	if !slices.Contains(marked, name) {
		return
	}
	meta.Annotations[contract.AnnotationInjected] = strings.Join(slices.DeleteFunc(marked, func(n string) bool { return n == name }), ",")
}

func setManaged(t *Target) {
	if t.Meta.Labels == nil {
		t.Meta.Labels = map[string]string{}
	}
	t.Meta.Labels[contract.LabelManaged] = "true"
}
