package jobs

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/apis/trainer/v1alpha1"
)

// TrainingRuntime adapts the namespaced trainer.kubeflow.org/v1alpha1
// TrainingRuntime: its templates are its replicated jobs' pod templates,
// its elastic policy mlPolicy.torch.elasticPolicy. Validated, not mutated.
type TrainingRuntime struct{}

// GVK implements Adapter.
func (TrainingRuntime) GVK() schema.GroupVersionKind {
	return trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainingRuntimeKind)
}

// Name implements Adapter.
func (TrainingRuntime) Name() string { return "trainingruntime" }

// Decode implements Adapter.
func (a TrainingRuntime) Decode(raw []byte) (Job, error) {
	obj, err := decodeAs[trainerv1alpha1.TrainingRuntime](a.GVK(), raw)
	if err != nil {
		return nil, err
	}
	return trainingRuntime{runtimeJob{&obj.Spec}, obj}, nil
}

type trainingRuntime struct {
	runtimeJob
	obj *trainerv1alpha1.TrainingRuntime
}

func (j trainingRuntime) Object() any              { return j.obj }
func (j trainingRuntime) Meta() *metav1.ObjectMeta { return &j.obj.ObjectMeta }

// NotMutatedReason implements NotMutated.
func (j trainingRuntime) NotMutatedReason() string { return notMutatedRuntime }

// RuntimeSpecOf returns the spec of a TrainingRuntime or ClusterTrainingRuntime job.
func RuntimeSpecOf(j Job) (*trainerv1alpha1.TrainingRuntimeSpec, bool) {
	switch r := j.(type) {
	case trainingRuntime:
		return r.spec, true
	case clusterTrainingRuntime:
		return r.spec, true
	}
	return nil, false
}
