package jobs

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

// Kubeflow Trainer v2 (TrainJob, TrainingRuntime, ClusterTrainingRuntime)
// differs from the v1 operators in one way that matters here: the pods are
// made by JobSet's Jobs from the runtime's templates, merged with the
// TrainJob, so no object trainguard admits holds the pod template a given
// job's pods get. trainguard therefore injects the pods themselves (see
// TrainJobPod) and only validates the three Trainer kinds; docs/trainjob.md
// says why in full.

// IsClusterScoped reports whether kinds handles gvk as a cluster-scoped kind.
func (k Kinds) IsClusterScoped(gvk schema.GroupVersionKind) bool {
	a, ok := k.For(gvk)
	return ok && a.ClusterScoped
}

// runtimeJob is the part TrainingRuntime and ClusterTrainingRuntime share.
type runtimeJob struct {
	spec *trainerv1alpha1.TrainingRuntimeSpec
}

const notMutatedRuntime = "runtimes are shared by many TrainJobs (and, cluster-wide, by many namespaces with different policies): " +
	"trainguard validates them and injects the TrainJob's pods instead"

// Templates are the pod templates of the replicated jobs, in order.
func (r runtimeJob) Templates() []Template {
	rjobs := r.spec.Template.Spec.ReplicatedJobs
	base := field.NewPath("spec", "template", "spec", "replicatedJobs")
	out := make([]Template, 0, len(rjobs))
	for i := range rjobs {
		tpl := &rjobs[i].Template.Spec.Template
		out = append(out, Template{Replica: rjobs[i].Name, Path: base.Index(i).Child("template", "spec", "template"), Meta: &tpl.ObjectMeta, Spec: &tpl.Spec})
	}
	return out
}

// Elastic: Trainer runs torchrun elastically when the runtime sets
// mlPolicy.torch.elasticPolicy; the trainer node's pods are the workers.
func (r runtimeJob) Elastic() Elastic {
	e := Elastic{Path: field.NewPath("spec", "mlPolicy", "torch", "elasticPolicy")}
	ml := r.spec.MLPolicy
	if ml == nil || ml.Torch == nil {
		return e
	}
	e.Enabled = ml.Torch.ElasticPolicy != nil
	if i := TrainerReplicatedJob(r.spec); i >= 0 {
		e.Workers = &r.spec.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec
	}
	if n := ml.Torch.NumProcPerNode; n != nil && n.Type == intstr.Int && n.IntVal > 0 {
		e.NprocPerNode, e.NprocPath = int64(n.IntVal), "spec.mlPolicy.torch.numProcPerNode"
	}
	return e
}

// TrainerReplicatedJob returns the index of the runtime's trainer job: the
// one labelled trainjob-ancestor-step=trainer, else the one named node; -1
// when there is none.
func TrainerReplicatedJob(spec *trainerv1alpha1.TrainingRuntimeSpec) int {
	rjobs := spec.Template.Spec.ReplicatedJobs
	for i := range rjobs {
		if rjobs[i].Template.Labels[trainerv1alpha1.LabelTrainJobAncestor] == trainerv1alpha1.AncestorTrainer {
			return i
		}
	}
	for i := range rjobs {
		if rjobs[i].Name == trainerv1alpha1.Node {
			return i
		}
	}
	return -1
}

// TrainingContainerNames puts Trainer's trainer container name (node)
// before the configured names, for pods of a TrainJob.
func TrainingContainerNames(configured []string) []string {
	return append([]string{trainerv1alpha1.Node}, configured...)
}
