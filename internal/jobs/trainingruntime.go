package jobs

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

// TrainingRuntime is the namespaced trainer.kubeflow.org/v1alpha1
// TrainingRuntime: its templates are its replicated jobs' pod templates,
// its elastic policy mlPolicy.torch.elasticPolicy. Validated, not mutated.
func TrainingRuntime() *Adapter {
	return runtimeKind(trainerv1alpha1.TrainingRuntimeKind, "trainingruntime", false,
		func(obj *trainerv1alpha1.TrainingRuntime) (*metav1.ObjectMeta, *trainerv1alpha1.TrainingRuntimeSpec) {
			return &obj.ObjectMeta, &obj.Spec
		})
}

// ClusterTrainingRuntime is the cluster-scoped TrainingRuntime (e.g.
// Trainer's own torch-distributed). Validated wherever it is admitted,
// never mutated.
func ClusterTrainingRuntime() *Adapter {
	return runtimeKind(trainerv1alpha1.ClusterTrainingRuntimeKind, "clustertrainingruntime", true,
		func(obj *trainerv1alpha1.ClusterTrainingRuntime) (*metav1.ObjectMeta, *trainerv1alpha1.TrainingRuntimeSpec) {
			return &obj.ObjectMeta, &obj.Spec
		})
}

// runtimeKind is one of the two runtime kinds; parts returns the object's
// metadata and spec.
func runtimeKind[T any](kind, short string, cluster bool,
	parts func(*T) (*metav1.ObjectMeta, *trainerv1alpha1.TrainingRuntimeSpec)) *Adapter {
	gvk := trainerv1alpha1.GroupVersion.WithKind(kind)
	return &Adapter{
		GVK:  gvk,
		Name: short,
		Decode: Decoder(gvk, func(obj *T) (Job, error) {
			meta, spec := parts(obj)
			return runtimeObject{runtimeJob{spec}, obj, meta}, nil
		}),
		Validate:      func(job Job, _ RuleEnv) Result { return runtimeRules(parts(objectOf[T](job))) },
		NotMutated:    func(Job) string { return notMutatedRuntime },
		SharedByJobs:  true,
		ClusterScoped: cluster,
	}
}

// runtimeObject is a decoded TrainingRuntime or ClusterTrainingRuntime.
type runtimeObject struct {
	runtimeJob
	obj  any
	meta *metav1.ObjectMeta
}

func (j runtimeObject) Object() any              { return j.obj }
func (j runtimeObject) Meta() *metav1.ObjectMeta { return j.meta }

// RuntimeSpecOf returns the spec of a TrainingRuntime or ClusterTrainingRuntime job.
func RuntimeSpecOf(j Job) (*trainerv1alpha1.TrainingRuntimeSpec, bool) {
	r, ok := j.(runtimeObject)
	return r.spec, ok
}
