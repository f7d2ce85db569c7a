package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/apis/kubedl/v1alpha1"
)

func (i *Injector) injectKubeDLJob(raw []byte, nsAnn map[string]string) (Result, error) {
	// Decoded twice: one copy to mutate, one to diff against (these local
	// types have no generated DeepCopy).
	var job, base kubedlv1alpha1.PyTorchJob
	for _, into := range []*kubedlv1alpha1.PyTorchJob{&job, &base} {
		if err := decodeObject(raw, into); err != nil {
			return Result{}, fmt.Errorf("decoding training.kubedl.io/v1alpha1 PyTorchJob: %w", err)
		}
	}
	templates := sortedTemplates(job.Spec.PyTorchReplicaSpecs, func(r *kubedlv1alpha1.ReplicaSpec) *corev1.PodTemplateSpec { return &r.Template })
	return i.mutateJob(&base, &job, &job.ObjectMeta, templates, nsAnn)
}
