package jobs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

// TrainJob rules that need the runtime the TrainJob refers to.

// reservedOverrideContainers may not get env through podSpecOverrides:
// Trainer sets theirs from spec.trainer and spec.initializer.
func reservedOverrideContainers() []string {
	return []string{trainerv1alpha1.DatasetInitializer, trainerv1alpha1.ModelInitializer, trainerv1alpha1.Node}
}

// validatePodSpecOverrides mirrors the JobSet plugin: a target job at most
// once, only existing jobs and containers (when the runtime is known), and
// no env for the trainer and initializer containers.
func validatePodSpecOverrides(overrides []trainerv1alpha1.PodSpecOverride, rt *trainerv1alpha1.TrainingRuntimeSpec, oPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, o := range overrides {
		for j, target := range o.TargetJobs {
			tPath := oPath.Index(i).Child("targetJobs").Index(j).Child("name")
			if seen[target.Name] {
				errs = append(errs, field.Duplicate(tPath, target.Name))
			}
			seen[target.Name] = true
			if rt != nil && containersOf(rt, target.Name) == nil {
				errs = append(errs, field.Invalid(tPath, target.Name, "must not have targetJob that doesn't exist in the runtime job template; use one of "+fmt.Sprint(replicatedJobNames(rt))))
			}
		}
		errs = append(errs, validateContainerOverrides(o, rt, oPath.Index(i))...)
	}
	return errs
}

func validateContainerOverrides(o trainerv1alpha1.PodSpecOverride, rt *trainerv1alpha1.TrainingRuntimeSpec, oPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, list := range []struct {
		name string
		cs   []trainerv1alpha1.ContainerOverride
	}{{"initContainers", o.InitContainers}, {"containers", o.Containers}} {
		for k, c := range list.cs {
			cPath := oPath.Child(list.name).Index(k)
			if len(c.Env) > 0 && contains(reservedOverrideContainers(), c.Name) {
				errs = append(errs, field.Forbidden(cPath.Child("env"),
					fmt.Sprintf("must not have envs for the %v containers; set them with spec.trainer.env or spec.initializer", reservedOverrideContainers())))
			}
			for _, target := range o.TargetJobs {
				if names := containersOf(rt, target.Name); names != nil && !names[c.Name] {
					errs = append(errs, field.Invalid(cPath.Child("name"), c.Name, fmt.Sprintf("must not have a container that doesn't exist in the runtime job %s", target.Name)))
				}
			}
		}
	}
	return errs
}

// containersOf returns the (init) container names of the runtime's job
// named job; nil when the runtime is unknown or has no such job.
func containersOf(rt *trainerv1alpha1.TrainingRuntimeSpec, job string) map[string]bool {
	if rt == nil {
		return nil
	}
	for _, rj := range rt.Template.Spec.ReplicatedJobs {
		if rj.Name != job {
			continue
		}
		names := map[string]bool{}
		spec := rj.Template.Spec.Template.Spec
		for _, c := range append(append(spec.InitContainers[:0:0], spec.InitContainers...), spec.Containers...) {
			names[c.Name] = true
		}
		return names
	}
	return nil
}

func replicatedJobNames(rt *trainerv1alpha1.TrainingRuntimeSpec) []string {
	var out []string
	for _, rj := range rt.Template.Spec.ReplicatedJobs {
		out = append(out, rj.Name)
	}
	return out
}

// validateInitializers: a dataset or model initializer needs the runtime's
// job and container of that name (the JobSet plugin).
func validateInitializers(job *trainerv1alpha1.TrainJob, rt *trainerv1alpha1.TrainingRuntimeSpec, refPath *field.Path) field.ErrorList {
	init := job.Spec.Initializer
	if init == nil {
		return nil
	}
	var errs field.ErrorList
	for _, step := range []struct {
		name, config string
		set          bool
	}{{trainerv1alpha1.DatasetInitializer, "datasetConfig", init.Dataset != nil}, {trainerv1alpha1.ModelInitializer, "modelConfig", init.Model != nil}} {
		if !step.set {
			continue
		}
		switch names := containersOf(rt, step.name); {
		case names == nil:
			errs = append(errs, field.Invalid(refPath, job.Spec.RuntimeRef.Name, fmt.Sprintf("must have %s job when trainJob is configured with input %s; use a runtime with that job or remove the initializer", step.name, step.config)))
		case !names[step.name]:
			errs = append(errs, field.Invalid(refPath, job.Spec.RuntimeRef.Name, fmt.Sprintf("must have container with name - %s in the %s job", step.name, step.name)))
		}
	}
	return errs
}

// validateMPINodes mirrors the MPI plugin: with runLauncherAsNode, two or
// more nodes need both a launcher and a node job.
func validateMPINodes(job *trainerv1alpha1.TrainJob, rt *trainerv1alpha1.TrainingRuntimeSpec, nodesPath *field.Path) field.ErrorList {
	mpi, nodes := rt.MLPolicy.MPI, job.Spec.Trainer.NumNodes
	if nodes == nil || *nodes < 2 || mpi.RunLauncherAsNode == nil || !*mpi.RunLauncherAsNode {
		return nil
	}
	if containersOf(rt, trainerv1alpha1.Launcher) != nil && containersOf(rt, trainerv1alpha1.Node) != nil {
		return nil
	}
	return field.ErrorList{field.Invalid(nodesPath, *nodes, "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node")}
}

// validateNodesInElasticRange: with an elastic runtime, the TrainJob's
// numNodes is the starting size and must lie in [minNodes, maxNodes], or
// torchrun's rendezvous waits forever or turns nodes away.
func validateNodesInElasticRange(job *trainerv1alpha1.TrainJob, rt *trainerv1alpha1.TrainingRuntimeSpec, specPath *field.Path) field.ErrorList {
	tr := job.Spec.Trainer
	if tr == nil || tr.NumNodes == nil || rt.MLPolicy == nil || rt.MLPolicy.Torch == nil || rt.MLPolicy.Torch.ElasticPolicy == nil {
		return nil
	}
	ep := rt.MLPolicy.Torch.ElasticPolicy
	minN, maxN := deref(ep.MinNodes, 1), deref(ep.MaxNodes, deref(ep.MinNodes, 1))
	if n := *tr.NumNodes; maxN >= minN && (n < minN || n > maxN) {
		return field.ErrorList{field.Invalid(specPath.Child("trainer", "numNodes"), n,
			fmt.Sprintf("must be between the runtime's elasticPolicy.minNodes (%d) and maxNodes (%d); set numNodes in that range or use another runtime", minN, maxN))}
	}
	return nil
}

// trainJobRules validates a TrainJob with the runtime env resolves.
func trainJobRules(tj *trainerv1alpha1.TrainJob, env RuleEnv) Result {
	rt, warning, errs := runtimeOf(env.Runtimes, tj)
	res := validateTrainJob(tj, rt)
	res.Errors = append(res.Errors, errs...)
	if warning != "" {
		res.Warnings = append(res.Warnings, warning)
	}
	return res
}
