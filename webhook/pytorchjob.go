package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	kubeflowv1 "github.com/trainguard/trainguard/internal/apis/kubeflow/v1"
)

func (i *Injector) injectKubeflowJob(raw []byte, nsAnn map[string]string) (Result, error) {
	// Decoded twice: one copy to mutate, one to diff against (these local
	// types have no generated DeepCopy).
	var job, base kubeflowv1.PyTorchJob
	for _, into := range []*kubeflowv1.PyTorchJob{&job, &base} {
		if err := decodeObject(raw, into); err != nil {
			return Result{}, fmt.Errorf("decoding kubeflow.org/v1 PyTorchJob: %w", err)
		}
	}
	templates := sortedTemplates(job.Spec.PyTorchReplicaSpecs, func(r *kubeflowv1.ReplicaSpec) *corev1.PodTemplateSpec { return &r.Template })
	return i.mutateJob(&base, &job, &job.ObjectMeta, templates, nsAnn)
}
