package jobs

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kubeflowv1 "github.com/trainguard/trainguard/internal/apis/kubeflow/v1"
)

// KubeflowPyTorchJob adapts kubeflow.org/v1 PyTorchJob.
type KubeflowPyTorchJob struct{}

// GVK implements Adapter.
func (KubeflowPyTorchJob) GVK() schema.GroupVersionKind {
	return kubeflowv1.GroupVersion.WithKind(kubeflowv1.Kind)
}

// Name implements Adapter.
func (KubeflowPyTorchJob) Name() string { return "pytorchjob" }

// Decode implements Adapter.
func (a KubeflowPyTorchJob) Decode(raw []byte) (Job, error) {
	obj, err := decodeAs[kubeflowv1.PyTorchJob](a.GVK(), raw)
	if err != nil {
		return nil, err
	}
	if err := validReplicaKeys(obj.Spec.PyTorchReplicaSpecs, field.NewPath("spec", "pytorchReplicaSpecs")); err != nil {
		return nil, err
	}
	return kubeflowJob{obj}, nil
}

// validReplicaKeys refuses replica types that cannot name a replica: the
// key is part of every patch path under the map, and the operator writes
// it, lowercased, into its pods' training.kubeflow.org/replica-type label.
// An empty key made the patch path /spec/pytorchReplicaSpecs//template/...,
// which the API server refused with an error naming neither the field nor
// the fix (found by FuzzInjectObject).
func validReplicaKeys[R any](specs map[string]*R, path *field.Path) error {
	var errs field.ErrorList
	for _, rt := range slices.Sorted(maps.Keys(specs)) {
		switch {
		case rt == "":
			errs = append(errs, field.Invalid(path.Key(rt), rt, "the replica type is empty; name it Master or Worker"))
		case len(validation.IsValidLabelValue(strings.ToLower(rt))) > 0:
			errs = append(errs, field.Invalid(path.Key(rt), rt, "the replica type must be usable as a label value "+
				"(at most 63 letters, digits, '-', '_' or '.'); name it Master or Worker"))
		}
	}
	return errs.ToAggregate()
}

type kubeflowJob struct{ *kubeflowv1.PyTorchJob }

// KubeflowJob returns the typed job behind j, for kubeflow's own rules.
func KubeflowJob(j Job) (*kubeflowv1.PyTorchJob, bool) {
	k, ok := j.(kubeflowJob)
	return k.PyTorchJob, ok
}

func (j kubeflowJob) Object() any              { return j.PyTorchJob }
func (j kubeflowJob) Meta() *metav1.ObjectMeta { return &j.ObjectMeta }

func (j kubeflowJob) Templates() []Template {
	return ReplicaTemplates(j.Spec.PyTorchReplicaSpecs, func(r *kubeflowv1.ReplicaSpec) *corev1.PodTemplateSpec { return &r.Template },
		field.NewPath("spec", "pytorchReplicaSpecs"))
}

// Elastic: kubeflow scales the Worker replicas whenever an elastic policy
// is set; processes per node come from spec.nprocPerNode, or the
// deprecated elasticPolicy.nProcPerNode.
func (j kubeflowJob) Elastic() Elastic {
	spec := &j.Spec
	e := Elastic{Enabled: spec.ElasticPolicy != nil, Path: field.NewPath("spec", "elasticPolicy")}
	if w := spec.PyTorchReplicaSpecs[kubeflowv1.ReplicaWorker]; w != nil {
		e.Workers = &w.Template.Spec
	}
	switch {
	case spec.NprocPerNode != nil:
		e.NprocPerNode, _ = ParseNproc(*spec.NprocPerNode)
		e.NprocPath = "spec.nprocPerNode"
	case spec.ElasticPolicy != nil && spec.ElasticPolicy.NProcPerNode != nil:
		e.NprocPerNode = max(int64(*spec.ElasticPolicy.NProcPerNode), 0)
		e.NprocPath = "spec.elasticPolicy.nProcPerNode"
	}
	return e
}

// ParseNproc parses an integer nprocPerNode the way the training operator
// does; ok is false for keywords (auto, cpu, gpu) and non-positive values.
func ParseNproc(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}
