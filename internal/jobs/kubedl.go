package jobs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
)

// KubeDLPyTorchJob is training.kubedl.io/v1alpha1 PyTorchJob. KubeDL
// labels its pods like the kubeflow operator before v1.7 (job-name), plus
// group-name with its API group.
func KubeDLPyTorchJob() *Adapter {
	return operatorKind(kubedlv1alpha1.GroupVersion.WithKind(kubedlv1alpha1.Kind), "kubedl-pytorchjob", func(obj *kubedlv1alpha1.PyTorchJob) (Job, error) {
		return operatorJob[kubedlv1alpha1.PyTorchJob, kubedlSchema]{obj}, validReplicaKeys(obj.Spec.PyTorchReplicaSpecs, replicaSpecsPath())
	}, validateKubeDLJob, kubedlJobOfPod)
}

// kubedlSchema says where a KubeDL PyTorchJob keeps what a Job reads.
type kubedlSchema struct{}

func (kubedlSchema) meta(obj *kubedlv1alpha1.PyTorchJob) *metav1.ObjectMeta { return &obj.ObjectMeta }

func (kubedlSchema) templates(obj *kubedlv1alpha1.PyTorchJob) []Template {
	// KubeDL's defaults and mapping are not pinned down here: its pods'
	// restartPolicy is left to each pod.
	return ReplicaTemplates(obj.Spec.PyTorchReplicaSpecs, func(r *kubedlv1alpha1.ReplicaSpec) *corev1.PodTemplateSpec { return &r.Template },
		nil, replicaSpecsPath())
}

// kubedlJobOfPod names the job of a KubeDL pod without a controller owner:
// job-name, with group-name saying KubeDL. The kubeflow label, when also
// set, is kubeflow's (kubeflowJobOfPod).
func kubedlJobOfPod(pod *corev1.Pod) (PodOwner, bool) {
	name := pod.Labels[kubeflowv1.LabelLegacyJobName]
	if metav1.GetControllerOf(pod) != nil || name == "" || pod.Labels[kubeflowv1.LabelJobName] != "" ||
		pod.Labels[kubeflowv1.LabelGroupName] != kubedlv1alpha1.GroupVersion.Group {
		return PodOwner{}, false
	}
	return PodOwner{APIVersion: kubedlv1alpha1.GroupVersion.String(), Kind: kubedlv1alpha1.Kind, Name: name}, true
}

// Elastic: KubeDL scales only with spec.enableElastic and a policy.
func (kubedlSchema) elastic(obj *kubedlv1alpha1.PyTorchJob) Elastic {
	spec := &obj.Spec
	ep := spec.ElasticPolicy
	e := Elastic{Enabled: spec.EnableElastic && ep != nil, Path: field.NewPath("spec", "elasticPolicy")}
	if w := spec.PyTorchReplicaSpecs["Worker"]; w != nil {
		e.Workers = &w.Template.Spec
	}
	if ep != nil && ep.NProcPerNode != nil && *ep.NProcPerNode > 0 {
		e.NprocPerNode, e.NprocPath = int64(*ep.NProcPerNode), "spec.elasticPolicy.nProcPerNode"
	}
	return e
}
