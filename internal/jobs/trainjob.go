package jobs

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/apis/trainer/v1alpha1"
)

// TrainJob adapts trainer.kubeflow.org/v1alpha1 TrainJob. A TrainJob holds
// no pod template (its pods come from the runtime's), so it has no
// templates and is validated only; its pods are injected (TrainJobPod).
type TrainJob struct{}

// GVK implements Adapter.
func (TrainJob) GVK() schema.GroupVersionKind {
	return trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind)
}

// Name implements Adapter.
func (TrainJob) Name() string { return "trainjob" }

// Decode implements Adapter.
func (a TrainJob) Decode(raw []byte) (Job, error) {
	obj, err := decodeAs[trainerv1alpha1.TrainJob](a.GVK(), raw)
	if err != nil {
		return nil, err
	}
	return trainJob{obj}, nil
}

type trainJob struct{ *trainerv1alpha1.TrainJob }

// TrainJobOf returns the typed TrainJob behind j, for Trainer's own rules.
func TrainJobOf(j Job) (*trainerv1alpha1.TrainJob, bool) {
	t, ok := j.(trainJob)
	return t.TrainJob, ok
}

func (j trainJob) Object() any              { return j.TrainJob }
func (j trainJob) Meta() *metav1.ObjectMeta { return &j.ObjectMeta }
func (j trainJob) Templates() []Template    { return nil }

// Elastic: a TrainJob's elastic policy lives in its runtime.
func (j trainJob) Elastic() Elastic { return Elastic{} }

// NotMutatedReason implements NotMutated.
func (j trainJob) NotMutatedReason() string {
	return "a TrainJob carries no pod template (its pods come from the runtime); trainguard injects its trainer pods instead"
}
