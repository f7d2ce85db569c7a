package jobs

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/apis/trainer/v1alpha1"
)

// TrainingRuntime is the namespaced trainer.kubeflow.org/v1alpha1
// TrainingRuntime: its templates are its replicated jobs' pod templates,
// its elastic policy mlPolicy.torch.elasticPolicy. Validated, not mutated.
func TrainingRuntime() Kind[trainerv1alpha1.TrainingRuntime] {
	return Kind[trainerv1alpha1.TrainingRuntime]{
		Of:    trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainingRuntimeKind),
		Short: "trainingruntime",
		Wrap: func(obj *trainerv1alpha1.TrainingRuntime) (Job, error) {
			return runtimeObject{runtimeJob{&obj.Spec}, obj, &obj.ObjectMeta}, nil
		},
		Rules: func(obj *trainerv1alpha1.TrainingRuntime, _ RuleEnv) Result {
			return runtimeRules(&obj.ObjectMeta, &obj.Spec)
		},
	}
}

// ClusterTrainingRuntime is the cluster-scoped TrainingRuntime (e.g.
// Trainer's own torch-distributed). Validated wherever it is admitted,
// never mutated.
func ClusterTrainingRuntime() Kind[trainerv1alpha1.ClusterTrainingRuntime] {
	return Kind[trainerv1alpha1.ClusterTrainingRuntime]{
		Of:    trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.ClusterTrainingRuntimeKind),
		Short: "clustertrainingruntime",
		Wrap: func(obj *trainerv1alpha1.ClusterTrainingRuntime) (Job, error) {
			return runtimeObject{runtimeJob{&obj.Spec}, obj, &obj.ObjectMeta}, nil
		},
		Rules: func(obj *trainerv1alpha1.ClusterTrainingRuntime, _ RuleEnv) Result {
			return runtimeRules(&obj.ObjectMeta, &obj.Spec)
		},
		Cluster: true,
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

// NotMutatedReason implements NotMutated.
func (j runtimeObject) NotMutatedReason() string { return notMutatedRuntime }

// SharedByJobs implements Shared: a runtime serves many TrainJobs.
func (j runtimeObject) SharedByJobs() bool { return true }

// RuntimeSpecOf returns the spec of a TrainingRuntime or ClusterTrainingRuntime job.
func RuntimeSpecOf(j Job) (*trainerv1alpha1.TrainingRuntimeSpec, bool) {
	r, ok := j.(runtimeObject)
	return r.spec, ok
}
