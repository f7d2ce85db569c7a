package jobs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/apis/kubedl/v1alpha1"
)

// KubeDLPyTorchJob adapts training.kubedl.io/v1alpha1 PyTorchJob.
type KubeDLPyTorchJob struct{}

// GVK implements Adapter.
func (KubeDLPyTorchJob) GVK() schema.GroupVersionKind {
	return kubedlv1alpha1.GroupVersion.WithKind(kubedlv1alpha1.Kind)
}

// Name implements Adapter.
func (KubeDLPyTorchJob) Name() string { return "kubedl-pytorchjob" }

// Decode implements Adapter.
func (a KubeDLPyTorchJob) Decode(raw []byte) (Job, error) {
	obj, err := decodeAs[kubedlv1alpha1.PyTorchJob](a.GVK(), raw)
	if err != nil {
		return nil, err
	}
	if err := validReplicaKeys(obj.Spec.PyTorchReplicaSpecs, field.NewPath("spec", "pytorchReplicaSpecs")); err != nil {
		return nil, err
	}
	return kubedlJob{obj}, nil
}

type kubedlJob struct{ *kubedlv1alpha1.PyTorchJob }

// KubeDLJob returns the typed job behind j, for KubeDL's own rules.
func KubeDLJob(j Job) (*kubedlv1alpha1.PyTorchJob, bool) {
	k, ok := j.(kubedlJob)
	return k.PyTorchJob, ok
}

func (j kubedlJob) Object() any              { return j.PyTorchJob }
func (j kubedlJob) Meta() *metav1.ObjectMeta { return &j.ObjectMeta }

func (j kubedlJob) Templates() []Template {
	return ReplicaTemplates(j.Spec.PyTorchReplicaSpecs, func(r *kubedlv1alpha1.ReplicaSpec) *corev1.PodTemplateSpec { return &r.Template },
		field.NewPath("spec", "pytorchReplicaSpecs"))
}

// Elastic: KubeDL scales only with spec.enableElastic and a policy.
func (j kubedlJob) Elastic() Elastic {
	ep := j.Spec.ElasticPolicy
	e := Elastic{Enabled: j.Spec.EnableElastic && ep != nil, Path: field.NewPath("spec", "elasticPolicy")}
	if w := j.Spec.PyTorchReplicaSpecs["Worker"]; w != nil {
		e.Workers = &w.Template.Spec
	}
	if ep != nil && ep.NProcPerNode != nil && *ep.NProcPerNode > 0 {
		e.NprocPerNode, e.NprocPath = int64(*ep.NProcPerNode), "spec.elasticPolicy.nProcPerNode"
	}
	return e
}
