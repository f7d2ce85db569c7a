package mutators

import (
	"strings"

	"github.com/trainguard/trainguard/internal/policy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// step is one switchable injection in the chain.
type step struct {
	name   string
	mutate func(*Target) bool
}

// chain lists the template injections in their fixed order; the marker
// annotation lists them in this order too.
func chain() []step {
	return []step{
		{policy.InjectionPreStop, PreStop},
		{policy.InjectionTaskD, TaskD},
		{policy.InjectionCheckpoint, Checkpoint},
		{policy.InjectionRecoverStrategy, RecoverStrategy},
		{policy.InjectionGPU, GPU},
	}
}

// InjectTemplate runs every enabled injection on t, labels it as managed and
// records what was applied in the marker annotation. It returns the names of
// the injections in place.
func InjectTemplate(t *Target) []string {
	var applied []string
	for _, s := range chain() {
		if t.Policy.Enabled(s.name) && s.mutate(t) {
			applied = append(applied, s.name)
		}
	}
	setManaged(t)
	// Union with the existing marker: on reinvocation an injection already in
	// place (e.g. the GPU limit it set) looks like the user's own.
	Mark(t.Meta, applied)
	return Marked(t.Meta.Annotations)
}

// InjectPodOfInjectedTemplate handles a pod whose template trainguard
// already injected: only what is decided per pod (where it may run) is added.
func InjectPodOfInjectedTemplate(t *Target, avoid []string) {
	setManaged(t)
	if t.Policy.Enabled(policy.InjectionAvoidNodes) && AvoidNodes(t, avoid) {
		Mark(t.Meta, []string{policy.InjectionAvoidNodes})
	}
}

// Marked returns the injections listed in an object's marker annotation.
func Marked(annotations map[string]string) []string {
	v, ok := annotations[policy.AnnotationInjected]
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
	for _, name := range policy.Injections() {
		if seen[name] {
			ordered = append(ordered, name)
		}
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[policy.AnnotationInjected] = strings.Join(ordered, ",")
}

func setManaged(t *Target) {
	if t.Meta.Labels == nil {
		t.Meta.Labels = map[string]string{}
	}
	t.Meta.Labels[policy.LabelManaged] = "true"
}

// InjectPod handles a pod nobody injected yet (a bare pod, or one from
// another controller): the whole chain, then the per-pod node avoidance.
func InjectPod(t *Target, avoid []string) {
	InjectTemplate(t)
	if t.Policy.Enabled(policy.InjectionAvoidNodes) && AvoidNodes(t, avoid) {
		Mark(t.Meta, []string{policy.InjectionAvoidNodes})
	}
}
