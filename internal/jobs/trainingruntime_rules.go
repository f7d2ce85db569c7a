package jobs

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Rules for TrainingRuntime and ClusterTrainingRuntime: Trainer v2.0.0's
// webhook (initializer, trainer and launcher jobs run exactly one replica),
// its CRD's CEL rules (which `trainguard validate` must apply itself
// offline), and the torch elastic policy, which Trainer v2.0 leaves as a
// TODO: torchrun receives --nnodes=min:max and --max-restarts unchecked.

func ancestorSteps() []string {
	return []string{trainerv1alpha1.AncestorTrainer, trainerv1alpha1.ModelInitializer, trainerv1alpha1.DatasetInitializer}
}

// runtimeRules validates a TrainingRuntime or ClusterTrainingRuntime.
func runtimeRules(meta *metav1.ObjectMeta, spec *trainerv1alpha1.TrainingRuntimeSpec) Result {
	specPath := field.NewPath("spec")
	errs := contract.ValidateMetadata(meta, field.NewPath("metadata"))
	for _, tpl := range (runtimeJob{spec}).Templates() {
		errs = append(errs, contract.ValidateMetadata(tpl.Meta, tpl.MetaPath())...)
	}
	errs = append(errs, validateReplicatedJobs(spec.Template.Spec.ReplicatedJobs, specPath.Child("template", "spec", "replicatedJobs"))...)
	warnings, mlErrs := validateMLPolicy(spec.MLPolicy, specPath.Child("mlPolicy"))
	warnings = append(warnings, disruptionWarning(spec, specPath.Child("template", "spec", "replicatedJobs"))...)
	return Result{Errors: append(errs, mlErrs...), Warnings: warnings}
}

// disruptionWarning: when trainguard (or a drain) evicts a trainer pod off
// a failing node, Kubernetes marks it DisruptionTarget; unless the Job's pod
// failure policy ignores that condition, the eviction counts against
// backoffLimit, and enough of them fail the Job and with it the JobSet.
func disruptionWarning(spec *trainerv1alpha1.TrainingRuntimeSpec, rjPath *field.Path) []string {
	i := TrainerReplicatedJob(spec)
	if i < 0 {
		return nil
	}
	js := spec.Template.Spec.ReplicatedJobs[i].Template.Spec
	if js.PodFailurePolicy != nil && disruptionIgnored(js.PodFailurePolicy.Rules) {
		return nil
	}
	return []string{fmt.Sprintf("%s: no podFailurePolicy rule ignores pods with the DisruptionTarget condition, so every pod evicted from a failing or drained node counts against backoffLimit and can fail the TrainJob; "+
		"add podFailurePolicy.rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget, status: \"True\"}]}] (see docs/trainjob.md)", rjPath.Index(i).Child("template", "spec", "podFailurePolicy"))}
}

func disruptionIgnored(rules []batchv1.PodFailurePolicyRule) bool {
	for _, r := range rules {
		if r.Action != batchv1.PodFailurePolicyActionIgnore {
			continue
		}
		for _, c := range r.OnPodConditions {
			if c.Type == corev1.DisruptionTarget && (c.Status == "" || c.Status == corev1.ConditionTrue) {
				return true
			}
		}
	}
	return false
}

// validateReplicatedJobs: Trainer runs the launcher and every job labelled
// as an initializer or trainer step as a single Job (replicas 1); the
// trainer's nodes are the Job's pods, set by numNodes.
func validateReplicatedJobs(rjobs []trainerv1alpha1.ReplicatedJob, rjPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, rj := range rjobs {
		if names[rj.Name] {
			errs = append(errs, field.Duplicate(rjPath.Index(i).Child("name"), rj.Name))
		}
		names[rj.Name] = true
		replicas := deref(rj.Replicas, 1)
		single := rj.Name == trainerv1alpha1.Launcher || contains(ancestorSteps(), rj.Template.Labels[trainerv1alpha1.LabelTrainJobAncestor])
		if single && replicas != 1 {
			errs = append(errs, field.Invalid(rjPath.Index(i).Child("replicas"), replicas,
				"always must be 1: Trainer runs this step as one Job (a trainer's nodes are set with mlPolicy.numNodes or the TrainJob's numNodes); set replicas: 1"))
		}
	}
	return errs
}

// validateMLPolicy applies the CRD's CEL rules and the elastic policy.
func validateMLPolicy(ml *trainerv1alpha1.MLPolicy, mlPath *field.Path) ([]string, field.ErrorList) {
	if ml == nil {
		return nil, nil
	}
	var errs field.ErrorList
	if ml.NumNodes != nil && *ml.NumNodes < 1 {
		errs = append(errs, field.Invalid(mlPath.Child("numNodes"), *ml.NumNodes, "must be at least 1"))
	}
	if ml.Torch != nil && ml.MPI != nil {
		errs = append(errs, field.Forbidden(mlPath, "Only one of the policy can be configured: set torch or mpi, not both"))
	}
	if ml.MPI != nil {
		errs = append(errs, validateMPIPolicy(ml.MPI, mlPath.Child("mpi"))...)
	}
	if ml.Torch == nil {
		return nil, errs
	}
	torchPath := mlPath.Child("torch")
	errs = append(errs, validateRuntimeNproc(intOrString(ml.Torch.NumProcPerNode), torchPath.Child("numProcPerNode"))...)
	ep := ml.Torch.ElasticPolicy
	if ep == nil {
		return nil, errs
	}
	if ml.NumNodes != nil {
		errs = append(errs, field.Forbidden(mlPath.Child("numNodes"),
			"numNodes should not be set if torch.elasticPolicy is configured: the elastic policy's minNodes and maxNodes size the job; remove numNodes"))
	}
	warnings, epErrs := validateTorchElastic(ep, torchPath.Child("elasticPolicy"))
	return warnings, append(errs, epErrs...)
}

func validateMPIPolicy(mpi *trainerv1alpha1.MPIMLPolicySource, mpiPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if mpi.NumProcPerNode != nil && *mpi.NumProcPerNode < 1 {
		errs = append(errs, field.Invalid(mpiPath.Child("numProcPerNode"), *mpi.NumProcPerNode, "must be at least 1"))
	}
	if impl := mpi.MPIImplementation; impl != nil && *impl != "OpenMPI" {
		errs = append(errs, field.NotSupported(mpiPath.Child("mpiImplementation"), *impl, []string{"OpenMPI"}))
	}
	return errs
}

// validateRuntimeNproc is the CRD's rule: self > 0 || self in ['auto', 'cpu', 'gpu'].
func validateRuntimeNproc(n *intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	if n == nil || (n.Type == intstr.Int && n.IntVal > 0) || (n.Type == intstr.String && contains(torchNprocKeywords(), n.StrVal)) {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, n.String(), "NumProcPerNode must be equal to auto, cpu, gpu, or int value (at least 1)")}
}

// validateTorchElastic checks minNodes ≥ 1, maxNodes ≥ minNodes,
// maxRestarts ≥ 0 and the autoscaler's metrics.
func validateTorchElastic(ep *trainerv1alpha1.TorchElasticPolicy, epPath *field.Path) ([]string, field.ErrorList) {
	var errs field.ErrorList
	if ep.MinNodes != nil && *ep.MinNodes < 1 {
		errs = append(errs, field.Invalid(epPath.Child("minNodes"), *ep.MinNodes, "must be at least 1"))
	}
	switch {
	case ep.MaxNodes == nil:
	case *ep.MaxNodes < 1:
		errs = append(errs, field.Invalid(epPath.Child("maxNodes"), *ep.MaxNodes, "must be at least 1"))
	case ep.MinNodes != nil && *ep.MaxNodes < *ep.MinNodes:
		errs = append(errs, field.Invalid(epPath.Child("maxNodes"), *ep.MaxNodes,
			fmt.Sprintf("must be ≥ minNodes (%d): torchrun gets --nnodes=%d:%d; raise maxNodes or lower minNodes", *ep.MinNodes, *ep.MinNodes, *ep.MaxNodes)))
	}
	errs = append(errs, validateMaxRestarts(ep.MaxRestarts, epPath)...)
	errs = append(errs, validateMetrics(ep.Metrics, epPath.Child("metrics"))...)
	var warnings []string
	minN, maxN := deref(ep.MinNodes, 1), deref(ep.MaxNodes, deref(ep.MinNodes, 1))
	if len(ep.Metrics) > 0 && minN == maxN {
		warnings = append(warnings, fmt.Sprintf("%s: minNodes equals maxNodes (%d), so the autoscaler can do nothing; widen the range or remove metrics", epPath.Child("metrics"), minN))
	}
	return warnings, errs
}

// AdvisoryCrossCheck turns a shared job's policy cross-check errors into
// warnings: a runtime serves TrainJobs with different policies (one may
// turn TaskD off and use port 9601 itself), so only its TrainJobs' pods,
// checked against their own TrainJob's policy, can be refused.
func AdvisoryCrossCheck(a *Adapter, errs field.ErrorList, warnings []string) (field.ErrorList, []string) {
	if !a.SharedByJobs || len(errs) == 0 {
		return errs, warnings
	}
	for _, e := range errs {
		warnings = append(warnings, e.Error()+" (for TrainJobs under the default policy; their pods are refused if it applies to them)")
	}
	return nil, warnings
}
