// Package jobs gives every kind trainguard handles one shape: a Job has
// metadata, pod templates and an elastic policy, whatever its API. The
// mutating webhook, `trainguard inject`, the validating webhook and
// `trainguard validate` work on that shape only; the controllers find a
// pod's job (Kinds.KeyOf) and its owner chain through the same adapters.
// The rest of the code reads an Adapter's fields (a nil func or a zero
// value is a capability the kind lacks) and never switches on a kind nor
// asserts a kind's or a job's type. The process builds one Kinds
// (Builtin) and hands it to the webhook and every controller, so a kind
// added to it reaches them all; adding a kind is DEVELOPERS.md's recipe
// ("Adding a job kind": its adapter file, one line in Builtin, one in the
// chart's kind list).
package jobs

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Job is one decoded object of a handled kind.
type Job interface {
	// Object is the typed object the templates point into; the patch is
	// the difference between two of them.
	Object() any
	// Meta is the object's own metadata.
	Meta() *metav1.ObjectMeta
	// Templates are the pod templates, in a stable order (a Pod is its own
	// single template).
	Templates() []Template
	// Elastic says whether, and how, the job trains elastically.
	Elastic() Elastic
}

// Template is one pod template inside a job, or a pod itself.
type Template struct {
	// Replica is the replica type ("Master", "Worker"); empty for a pod.
	Replica string
	// Path is the template's field path; nil for a pod itself.
	Path *field.Path
	Meta *metav1.ObjectMeta
	Spec *corev1.PodSpec
	// PodRestartPolicy is the restartPolicy the template's pods will run
	// with, where the kind lets it be known at admission (the operator
	// derives it from the replica's own restartPolicy, or the template's is
	// final); empty where only each pod knows. Injections that depend on it
	// are then completed pod by pod.
	PodRestartPolicy corev1.RestartPolicy
}

// MetaPath is the path of the template's metadata.
func (t Template) MetaPath() *field.Path { return t.child("metadata") }

// SpecPath is the path of the template's pod spec.
func (t Template) SpecPath() *field.Path { return t.child("spec") }

// Where names the template in warnings; empty for a pod.
func (t Template) Where() string {
	if t.Path == nil {
		return ""
	}
	return t.Path.String()
}

func (t Template) child(name string) *field.Path {
	if t.Path == nil {
		return field.NewPath(name)
	}
	return t.Path.Child(name)
}

// Elastic is what the cross-field checks need to know about elastic
// training, in any kind's vocabulary.
type Elastic struct {
	// Enabled: the operator will scale the job.
	Enabled bool
	// Path is where the kind's elastic policy lives (spec.elasticPolicy).
	Path *field.Path
	// Workers is the pod spec elastic training scales; nil when absent.
	Workers *corev1.PodSpec
	// NprocPerNode is the integer processes per node, 0 when not set as one.
	NprocPerNode int64
	// NprocPath names where NprocPerNode came from.
	NprocPath string
}

// Kinds is a set of adapters, looked up by group/version/kind. It is a
// value: tests add a kind with With without changing anyone else's set.
type Kinds struct{ adapters []*Adapter }

// Builtin returns the kinds trainguard handles; the process calls it once.
func Builtin() Kinds {
	return Kinds{adapters: []*Adapter{
		KubeflowPyTorchJob(),
		KubeDLPyTorchJob(),
		Pod(),
		TrainJob(),
		TrainingRuntime(),
		ClusterTrainingRuntime(),
		BatchJob(),
	}}
}

// With returns k plus more adapters.
func (k Kinds) With(more ...*Adapter) Kinds {
	return Kinds{adapters: append(append([]*Adapter{}, k.adapters...), more...)}
}

// All returns the adapters in registration order.
func (k Kinds) All() []*Adapter { return append([]*Adapter{}, k.adapters...) }

// For returns the adapter for gvk; ok is false for a kind trainguard does not handle.
func (k Kinds) For(gvk schema.GroupVersionKind) (*Adapter, bool) {
	for _, a := range k.adapters {
		if a.GVK == gvk {
			return a, true
		}
	}
	return nil, false
}

// String names a GVK for logs and errors: kubeflow.org/v1 PyTorchJob.
func String(gvk schema.GroupVersionKind) string {
	return strings.TrimPrefix(gvk.GroupVersion().String()+" "+gvk.Kind, "/")
}

// decodeAs decodes raw into a fresh *T and names the kind in the error.
func decodeAs[T any](gvk schema.GroupVersionKind, raw []byte) (*T, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("decoding %s: empty object", String(gvk))
	}
	obj := new(T)
	if err := Decode(raw, obj); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", String(gvk), err)
	}
	return obj, nil
}

// ReplicaTemplates returns the non-nil replicas' templates sorted by
// replica type, so warnings and patches are deterministic whatever the map
// order. specsPath is the path of the replica map.
//
// podRestartPolicy says what restartPolicy the operator gives a replica's
// pods (Template.PodRestartPolicy); nil where that is not known.
func ReplicaTemplates[R any](specs map[string]*R, template func(*R) *corev1.PodTemplateSpec, podRestartPolicy func(*R) corev1.RestartPolicy, specsPath *field.Path) []Template {
	out := make([]Template, 0, len(specs))
	for _, rt := range slices.Sorted(maps.Keys(specs)) {
		if specs[rt] == nil {
			continue
		}
		tpl := template(specs[rt])
		t := Template{Replica: rt, Path: specsPath.Key(rt).Child("template"), Meta: &tpl.ObjectMeta, Spec: &tpl.Spec}
		if podRestartPolicy != nil {
			t.PodRestartPolicy = podRestartPolicy(specs[rt])
		}
		out = append(out, t)
	}
	return out
}
