package jobs

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Rules for trainer.kubeflow.org/v1alpha1 TrainJob: everything Kubeflow
// Trainer v2.0.0's own webhook (pkg/webhooks), its runtime plugins'
// Validate (torch, MPI, JobSet) and its CRD's CEL rules refuse, plus the
// elastic range of the runtime, which nothing checks. Where Trainer's rule
// depends on the runtime (torch or MPI, which replicated jobs it has) and
// the runtime is not known, trainguard applies the torch rule, which is
// the stricter one for every value Trainer's torch runtime refuses: so
// trainguard never admits what Trainer refuses, and may refuse a little more.
// Where a later Trainer release admits more (torchtune models, an unset
// numNodes), trainguard admits it too: it cannot tell the cluster's release
// (trainer_versions.go; docs/trainjob.md#trainer-versions).

// Values Trainer accepts; funcs so nothing can change them.
func torchNprocKeywords() []string { return []string{"auto", "cpu", "gpu"} }
func torchRunReservedEnv() []string {
	return []string{"PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE"}
}
func trainJobControllers() []string {
	return []string{trainerv1alpha1.DefaultManagedBy, trainerv1alpha1.MultiKueueManagedBy}
}

// torchTuneModels are the models of every Trainer release trainguard is
// tested with: v2.0.0 has llama3_2/1B, llama3_2/7B, llama3_3/70B; v2.1
// replaced 7B with llama3_2/3B and added qwen2_5/1.5B. The webhook cannot
// tell which release the cluster runs, so it must not refuse a model that
// release supports; the release's own webhook refuses the rest.
func torchTuneModels() []string {
	return []string{"llama3_2/1B", "llama3_2/3B", "llama3_2/7B", "llama3_3/70B", "qwen2_5/1.5B"}
}
func runtimeKinds() []string {
	return []string{trainerv1alpha1.ClusterTrainingRuntimeKind, trainerv1alpha1.TrainingRuntimeKind}
}

// validateTrainJob applies the TrainJob rules; rt is the runtime it refers
// to when known (nil otherwise).
func validateTrainJob(job *trainerv1alpha1.TrainJob, rt *trainerv1alpha1.TrainingRuntimeSpec) Result {
	metaPath, specPath := field.NewPath("metadata"), field.NewPath("spec")
	var res Result
	res.Errors = append(res.Errors, validateTrainJobName(job, metaPath)...)
	res.Errors = append(res.Errors, contract.ValidateMetadata(&job.ObjectMeta, metaPath)...)
	res.Errors = append(res.Errors, validateRuntimeRef(job.Spec.RuntimeRef, specPath.Child("runtimeRef"))...)
	if m := job.Spec.ManagedBy; m != nil && !contains(trainJobControllers(), *m) {
		res.Errors = append(res.Errors, field.NotSupported(specPath.Child("managedBy"), *m, trainJobControllers()))
	}
	res.Errors = append(res.Errors, validateTrainer(job, rt, specPath)...)
	res.Warnings = append(res.Warnings, torchTuneNodesWarning(job, specPath)...)
	res.Errors = append(res.Errors, validatePodSpecOverrides(job.Spec.PodSpecOverrides, rt, specPath.Child("podSpecOverrides"))...)
	if rt != nil {
		res.Errors = append(res.Errors, validateInitializers(job, rt, specPath.Child("runtimeRef"))...)
		res.Errors = append(res.Errors, validateNodesInElasticRange(job, rt, specPath)...)
	}
	return res
}

// validateTrainJobName: Trainer requires a DNS-1035 label, because the
// JobSet, its Jobs and the headless Service are named after the TrainJob.
func validateTrainJobName(job *trainerv1alpha1.TrainJob, metaPath *field.Path) field.ErrorList {
	return validateDNS1035Name(&job.ObjectMeta, metaPath, "Trainer names the JobSet, its Jobs and Service after the TrainJob")
}

// validateRuntimeRef: Trainer only knows its own two runtime kinds.
func validateRuntimeRef(ref trainerv1alpha1.RuntimeRef, refPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ref.Name == "" {
		errs = append(errs, field.Required(refPath.Child("name"), "must name a TrainingRuntime or ClusterTrainingRuntime, e.g. torch-distributed"))
	}
	if g := ref.APIGroup; g != nil && *g != trainerv1alpha1.GroupVersion.Group {
		errs = append(errs, field.NotSupported(refPath.Child("apiGroup"), *g, []string{trainerv1alpha1.GroupVersion.Group}))
	}
	if k := ref.Kind; k != nil && !contains(runtimeKinds(), *k) {
		errs = append(errs, field.NotSupported(refPath.Child("kind"), *k, runtimeKinds()))
	}
	return errs
}

// RuntimeRefKey names the runtime a TrainJob refers to, with Trainer's
// defaults applied: ClusterTrainingRuntime unless it says TrainingRuntime.
func RuntimeRefKey(ref trainerv1alpha1.RuntimeRef) (kind, name string) {
	kind = trainerv1alpha1.ClusterTrainingRuntimeKind
	if ref.Kind != nil && *ref.Kind != "" {
		kind = *ref.Kind
	}
	return kind, ref.Name
}

// validateTrainer checks spec.trainer: numNodes, numProcPerNode, reserved
// torchrun env and torchtune's supported models (the torch plugin).
func validateTrainer(job *trainerv1alpha1.TrainJob, rt *trainerv1alpha1.TrainingRuntimeSpec, specPath *field.Path) field.ErrorList {
	tr := job.Spec.Trainer
	if tr == nil {
		return nil
	}
	trPath := specPath.Child("trainer")
	var errs field.ErrorList
	if tr.NumNodes != nil && *tr.NumNodes < 1 {
		errs = append(errs, field.Invalid(trPath.Child("numNodes"), *tr.NumNodes, "must be at least 1"))
	}
	mpi := rt != nil && rt.MLPolicy != nil && rt.MLPolicy.MPI != nil
	errs = append(errs, validateTrainJobNproc(intOrString(tr.NumProcPerNode), mpi, trPath.Child("numProcPerNode"))...)
	if mpi {
		return append(errs, validateMPINodes(job, rt, trPath.Child("numNodes"))...)
	}
	if reserved := reservedEnv(tr); len(reserved) > 0 {
		errs = append(errs, field.Invalid(trPath.Child("env"), strings.Join(reserved, ","),
			fmt.Sprintf("must not have reserved envs, invalid envs configured: %v; Trainer sets these for torchrun from numNodes and numProcPerNode, remove them", reserved)))
	}
	// Trainer's torch plugin checks torchtune only when numProcPerNode is set.
	if tr.NumProcPerNode != nil && slices.Equal(tr.Command, []string{"tune", "run"}) {
		errs = append(errs, validateTorchTune(job, specPath)...)
	}
	return errs
}

// validateTrainJobNproc: torch takes auto, cpu, gpu or an integer; MPI only
// an integer. A non-positive integer makes torchrun fail at start.
func validateTrainJobNproc(n *intstr.IntOrString, mpi bool, fldPath *field.Path) field.ErrorList {
	switch {
	case n == nil:
		return nil
	case n.Type == intstr.String && mpi:
		return field.ErrorList{field.Invalid(fldPath, n.StrVal, "must have an int value for MPI TrainJob; set a positive integer such as 4")}
	case n.Type == intstr.String && !contains(torchNprocKeywords(), n.StrVal):
		return field.ErrorList{field.Invalid(fldPath, n.StrVal, fmt.Sprintf("must have an int value or %v; set auto, cpu, gpu or a positive integer such as 4", torchNprocKeywords()))}
	case n.Type == intstr.Int && n.IntVal < 1:
		return field.ErrorList{field.Invalid(fldPath, n.IntVal, "must be at least 1 (torchrun's --nproc-per-node)")}
	}
	return nil
}

// reservedEnv returns the torchrun env names Trainer reserves that tr sets, sorted.
func reservedEnv(tr *trainerv1alpha1.Trainer) []string {
	var out []string
	for _, e := range tr.Env {
		if contains(torchRunReservedEnv(), e.Name) && !contains(out, e.Name) {
			out = append(out, e.Name)
		}
	}
	sort.Strings(out)
	return out
}

// validateTorchTune mirrors the torch plugin's torchtune rules: the runtime
// name (torchtune-<model>-<size>) must name a supported model, and only
// Llama 3.3 70B runs on more than one node.
func validateTorchTune(job *trainerv1alpha1.TrainJob, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	model := torchTuneModel(job.Spec.RuntimeRef.Name)
	if !contains(torchTuneModels(), model) {
		errs = append(errs, field.Invalid(specPath.Child("runtimeRef", "name"), job.Spec.RuntimeRef.Name,
			fmt.Sprintf("must have a supported pretrained model, invalid model configured: %s; use one of the torchtune runtimes for %v", model, torchTuneModels())))
	}
	nodesPath := specPath.Child("trainer", "numNodes")
	// Unset is 1 (Trainer v2.2+; see torchTuneNodesWarning for v2.0, v2.1).
	if nodes := job.Spec.Trainer.NumNodes; nodes != nil && *nodes > 1 && model != "llama3_3/70B" {
		errs = append(errs, field.Invalid(nodesPath, *nodes, fmt.Sprintf("must be 1 for %v model", model)))
	}
	return errs
}

// torchTuneNodesWarning: Trainer v2.0 and v2.1's webhooks dereference
// numNodes of a torchtune (tune run) TrainJob with numProcPerNode and fail
// without it, while v2.2+ takes 1. trainguard cannot tell the cluster's release,
// so it warns instead of refusing an object v2.3.0 admits.
func torchTuneNodesWarning(job *trainerv1alpha1.TrainJob, specPath *field.Path) []string {
	tr := job.Spec.Trainer
	if tr == nil || tr.NumProcPerNode == nil || tr.NumNodes != nil || !slices.Equal(tr.Command, []string{"tune", "run"}) {
		return nil
	}
	return []string{fmt.Sprintf("%s: not set; Trainer v2.0 and v2.1's webhooks fail on a torchtune (tune run) TrainJob with numProcPerNode and no numNodes (v2.2+ takes 1): set numNodes: 1", specPath.Child("trainer", "numNodes"))}
}

// torchTuneModel derives the model from a torchtune runtime name the way
// Trainer does: torchtune-llama3.2-7b → llama3_2/7B.
func torchTuneModel(runtimeName string) string {
	f := strings.Split(runtimeName, "-")
	if len(f) != 3 {
		return ""
	}
	return strings.ReplaceAll(f[1], ".", "_") + "/" + strings.ToUpper(f[2])
}

// validateTrainJobUpdate: runtimeRef and managedBy are immutable (the
// CRD's CEL rules): the JobSet was built from the runtime, and two
// controllers would otherwise both act on the TrainJob.
func validateTrainJobUpdate(cur, old *trainerv1alpha1.TrainJob) field.ErrorList {
	specPath := field.NewPath("spec")
	var errs field.ErrorList
	if !reflect.DeepEqual(cur.Spec.RuntimeRef, old.Spec.RuntimeRef) {
		errs = append(errs, field.Invalid(specPath.Child("runtimeRef"), cur.Spec.RuntimeRef.Name, "runtimeRef is immutable; create a new TrainJob to use another runtime"))
	}
	if !reflect.DeepEqual(cur.Spec.ManagedBy, old.Spec.ManagedBy) {
		errs = append(errs, field.Invalid(specPath.Child("managedBy"), ptrString(cur.Spec.ManagedBy), "ManagedBy value is immutable"))
	}
	return errs
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// intOrString unwraps the local type's value; nil stays nil.
func intOrString(n *trainerv1alpha1.IntOrString) *intstr.IntOrString {
	if n == nil {
		return nil
	}
	return &n.IntOrString
}
