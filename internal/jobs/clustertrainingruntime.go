package jobs

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/apis/trainer/v1alpha1"
)

// ClusterTrainingRuntime adapts the cluster-scoped
// trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime (e.g. Trainer's own
// torch-distributed). Validated wherever it is admitted, never mutated.
type ClusterTrainingRuntime struct{}

// GVK implements Adapter.
func (ClusterTrainingRuntime) GVK() schema.GroupVersionKind {
	return trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.ClusterTrainingRuntimeKind)
}

// Name implements Adapter.
func (ClusterTrainingRuntime) Name() string { return "clustertrainingruntime" }

// Decode implements Adapter.
func (a ClusterTrainingRuntime) Decode(raw []byte) (Job, error) {
	obj, err := decodeAs[trainerv1alpha1.ClusterTrainingRuntime](a.GVK(), raw)
	if err != nil {
		return nil, err
	}
	return clusterTrainingRuntime{runtimeJob{&obj.Spec}, obj}, nil
}

type clusterTrainingRuntime struct {
	runtimeJob
	obj *trainerv1alpha1.ClusterTrainingRuntime
}

func (j clusterTrainingRuntime) Object() any              { return j.obj }
func (j clusterTrainingRuntime) Meta() *metav1.ObjectMeta { return &j.obj.ObjectMeta }

// NotMutatedReason implements NotMutated.
func (j clusterTrainingRuntime) NotMutatedReason() string { return notMutatedRuntime }

// ClusterScoped implements ClusterScoped.
func (ClusterTrainingRuntime) ClusterScoped() bool { return true }
