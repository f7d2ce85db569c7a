package webhook

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	kubeflowv1 "github.com/trainguard/trainguard/apis/kubeflow/v1"
)

func (i *Injector) injectKubeflowJob(raw []byte, nsAnn map[string]string) (Result, error) {
	var job kubeflowv1.PyTorchJob
	if err := json.Unmarshal(raw, &job); err != nil {
		return Result{}, fmt.Errorf("decoding kubeflow.org/v1 PyTorchJob: %w", err)
	}
	templates := sortedTemplates(job.Spec.PyTorchReplicaSpecs, func(r *kubeflowv1.ReplicaSpec) *corev1.PodTemplateSpec { return &r.Template })
	return i.mutateJob(raw, &job, &job.ObjectMeta, templates, nsAnn)
}
