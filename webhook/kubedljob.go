package webhook

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	kubedlv1alpha1 "github.com/trainguard/trainguard/apis/kubedl/v1alpha1"
)

func (i *Injector) injectKubeDLJob(raw []byte, nsAnn map[string]string) (Result, error) {
	var job kubedlv1alpha1.PyTorchJob
	if err := json.Unmarshal(raw, &job); err != nil {
		return Result{}, fmt.Errorf("decoding training.kubedl.io/v1alpha1 PyTorchJob: %w", err)
	}
	templates := sortedTemplates(job.Spec.PyTorchReplicaSpecs, func(r *kubedlv1alpha1.ReplicaSpec) *corev1.PodTemplateSpec { return &r.Template })
	return i.mutateJob(raw, &job, &job.ObjectMeta, templates, nsAnn)
}
