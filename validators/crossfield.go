package validators

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/policy"
)

// Cross-field checks compare the final object (the validating webhook sees
// it after the mutating webhook ran) with the effective policy.

// strategyElasticTraining is MindCluster's elastic recover strategy.
const strategyElasticTraining = "elastic-training"

// resolve returns the effective policy for an object. Bad object annotations
// are reported as errors by contract.ValidateMetadata, so only the warnings about the
// namespace's annotations (which the object's author cannot see) are kept.
func (v *Validator) resolve(nsAnnotations, objAnnotations map[string]string) (*contract.Policy, []string) {
	cfg := v.Config
	if cfg == nil {
		cfg = configv1alpha1.Default()
	}
	_, nsWarnings := policy.Resolve(cfg, nsAnnotations, nil)
	p, _ := policy.Resolve(cfg, nsAnnotations, objAnnotations)
	return p, nsWarnings
}

// checkTaskDPort refuses a training container that uses TaskD's port number
// or port name for anything but {name: taskd-port, containerPort: 9601}:
// MindCluster's TaskD could not bind, or would be reached on the wrong port.
// specPath is the path of the PodSpec.
func checkTaskDPort(p *contract.Policy, spec *corev1.PodSpec, specPath *field.Path) field.ErrorList {
	if !p.TaskD {
		return nil
	}
	i := contract.TrainingContainer(spec, p.TrainingContainers)
	if i < 0 {
		return nil
	}
	portsPath := specPath.Child("containers").Index(i).Child("ports")
	var errs field.ErrorList
	for j, port := range spec.Containers[i].Ports {
		byName := port.Name == contract.TaskDPortName
		byNumber := port.ContainerPort == p.TaskDPort
		switch {
		case byName && byNumber:
			// Exactly what the TaskD injection adds.
		case byName:
			errs = append(errs, field.Invalid(portsPath.Index(j).Child("name"), port.Name,
				fmt.Sprintf("the port name %s is reserved for MindCluster TaskD on port %d while TaskD is enabled; rename this port or set containerPort %d",
					contract.TaskDPortName, p.TaskDPort, p.TaskDPort)))
		case byNumber:
			errs = append(errs, field.Invalid(portsPath.Index(j).Child("containerPort"), port.ContainerPort,
				fmt.Sprintf("port %d is reserved for MindCluster TaskD (name %s) while TaskD is enabled; use another port, or name this one %s",
					p.TaskDPort, contract.TaskDPortName, contract.TaskDPortName)))
		}
	}
	return errs
}

// checkInProcess refuses, where trainguard.io/in-process-recovery asks
// for the supervisor and it would apply (contract.InProcessApplies), a
// training container without a command: the supervisor runs the command
// it prefixes, and the image's entrypoint is not known at admission.
func checkInProcess(p *contract.Policy, kind string, elastic bool, spec *corev1.PodSpec, specPath *field.Path) field.ErrorList {
	i := contract.TrainingContainer(spec, p.TrainingContainers)
	if !p.InProcessRecovery || i < 0 {
		return nil
	}
	c := &spec.Containers[i]
	if way, _ := contract.InProcessApplies(kind, elastic, c); way != contract.InProcessCommand || len(c.Command) > 0 {
		return nil
	}
	return field.ErrorList{field.Required(specPath.Child("containers").Index(i).Child("command"),
		fmt.Sprintf("%s=enabled runs the container's command under the SDK's supervisor, and this container has none (its image's entrypoint is not known at admission): set command to what the entrypoint runs (e.g. [python3, train.py]), or remove the annotation",
			contract.AnnotationInProcessRecovery))}
}

// nprocAboveGPUWarning warns when torchrun would start more processes per
// node than the training container has accelerators: ranks would share a
// GPU or fail to start. Containers without the resource (CPU training, or
// a gpu-limit of 0) are left alone. nprocPath names where nproc came from.
func nprocAboveGPUWarning(p *contract.Policy, nproc int64, nprocPath string, spec *corev1.PodSpec, specPath *field.Path) []string {
	i := contract.TrainingContainer(spec, p.TrainingContainers)
	if i < 0 {
		return nil
	}
	c := &spec.Containers[i]
	limit, ok := c.Resources.Limits[p.GPUResource]
	if !ok || limit.Value() <= 0 || nproc <= limit.Value() {
		return nil
	}
	return []string{fmt.Sprintf("%s: %d processes per node but container %q (%s) is limited to %d %s; ranks will share accelerators or fail to start; lower %s or raise the limit",
		nprocPath, nproc, c.Name, specPath.Child("containers").Index(i), limit.Value(), p.GPUResource, nprocPath)}
}

// elasticStrategyWarning warns when MindCluster is asked for elastic-training
// on a job that has no elastic policy: there is nothing it could scale.
// The MindCluster annotation on the final object is what MindCluster reads;
// without it, the resolved policy is what the mutator would set.
func elasticStrategyWarning(p *contract.Policy, annotations map[string]string, metaPath, elasticPath *field.Path) []string {
	key, list := contract.AnnotationMindClusterRecoverStrategy, annotations[contract.AnnotationMindClusterRecoverStrategy]
	if list == "" {
		key, list = contract.AnnotationRecoverStrategy, p.RecoverStrategy
	}
	if !contract.HasStrategy(list, strategyElasticTraining) {
		return nil
	}
	return []string{fmt.Sprintf("%s: recover strategy %q includes %s but the job has no %s, so there is nothing to scale; add %s or remove %s",
		metaPath.Child("annotations").Key(key), list, strategyElasticTraining, elasticPath, elasticPath, strategyElasticTraining)}
}
