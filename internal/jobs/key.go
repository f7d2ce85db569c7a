package jobs

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Key is a job's identity: the job a pod belongs to, or the pod itself
// when it has none (a bare pod). Bad-node records, the checkpoint
// outcome's Events and the priority boost are keyed by it. trainguard
// derives it (Kinds.KeyOf), never reads it from a tenant-written value alone.
type Key struct {
	Namespace string
	// APIVersion and Kind of the job; "v1", "Pod" for a bare pod.
	APIVersion string
	Kind       string
	Name       string
}

// Bare says the pod has no job: trainguard itself recreates it.
func (k Key) Bare() bool { return k.APIVersion == "v1" && k.Kind == "Pod" }

// Group is the API group of the job's kind ("" for a bare pod).
func (k Key) Group() string {
	gv, err := schema.ParseGroupVersion(k.APIVersion)
	if err != nil {
		return k.APIVersion
	}
	return gv.Group
}

// String is namespace/Kind.group/name, as logs and records write it.
func (k Key) String() string {
	return k.Namespace + "/" + k.Kind + "." + k.Group() + "/" + k.Name
}

// Is says ref names this key's job (any version of its group and kind).
func (k Key) Is(ref metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && k.Kind == ref.Kind && k.Group() == gv.Group && k.Name == ref.Name
}

// ParseKey reverses String, given the APIVersion it does not hold.
func ParseKey(s, apiVersion string) (Key, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return Key{}, false
	}
	kind, group, ok := strings.Cut(parts[1], ".")
	if !ok || kind == "" {
		return Key{}, false
	}
	k := Key{Namespace: parts[0], APIVersion: apiVersion, Kind: kind, Name: parts[2]}
	if k.Group() != group {
		return Key{}, false
	}
	return k, true
}

// KeyOf returns the job of a pod: the job a kind's labels name when they
// agree with the pod (JobSet's, whose controller, a batch Job, is not the
// job; the operators' label for a pod without an owner reference), else
// the controller owner, else the pod itself. The caller must set
// pod.Namespace: an admission request may carry the namespace only in the
// request, not in the object. It allocates nothing per kind: k is built
// once, by whoever wires the process.
func (k Kinds) KeyOf(pod *corev1.Pod) Key {
	ns := pod.Namespace
	for _, a := range k.adapters {
		if a.JobOfPod == nil {
			continue
		}
		if o, ok := a.JobOfPod(pod); ok {
			return Key{Namespace: ns, APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name}
		}
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return Key{Namespace: ns, APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name}
	}
	return Key{Namespace: ns, APIVersion: "v1", Kind: "Pod", Name: pod.Name}
}

// JobLabels are the pod labels KeyOf reads (Adapter.JobLabels of every
// kind); the rescheduler's pod cache keeps them.
func (k Kinds) JobLabels() []string {
	var out []string
	for _, a := range k.adapters {
		if a.JobOfPod != nil {
			out = append(out, a.JobLabels...)
		}
	}
	return out
}

// OwningKinds are the kinds a pod's owner chain ends at (the last hop of
// every Adapter.PodOwnerChain): the jobs whose Kueue Workloads and Events
// trainguard acts on.
func (k Kinds) OwningKinds() []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, a := range k.adapters {
		if n := len(a.PodOwnerChain); n > 0 && !slices.Contains(out, a.PodOwnerChain[n-1]) {
			out = append(out, a.PodOwnerChain[n-1])
		}
	}
	return out
}
