package validators

import (
	"github.com/trainguard/trainguard/internal/testing/builders"

	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/config"
	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func taskdPort() corev1.ContainerPort {
	return corev1.ContainerPort{Name: "taskd-port", ContainerPort: 9601}
}

func TestTaskDPortRules(t *testing.T) {
	workerPorts := func(ports ...corev1.ContainerPort) *builders.KubeflowJobWrapper {
		return job().WithWorkerContainer(func(c *corev1.Container) { c.Ports = ports })
	}
	const ports = "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports"
	runRuleCases(t, []ruleCase{
		{name: "injected TaskD port", obj: object(workerPorts(taskdPort(), corev1.ContainerPort{Name: "pytorchjob-port", ContainerPort: 23456}))},
		{name: "9601 under another name", obj: object(workerPorts(corev1.ContainerPort{Name: "metrics", ContainerPort: 9601})),
			errs: []string{ports + "[0].containerPort"}},
		{name: "9601 without a name", obj: object(workerPorts(taskdPort(), corev1.ContainerPort{ContainerPort: 9601})),
			errs: []string{ports + "[1].containerPort"}},
		{name: "taskd-port on another number", obj: object(workerPorts(corev1.ContainerPort{Name: "taskd-port", ContainerPort: 9000})),
			errs: []string{ports + "[0].name"}},
		{name: "TaskD disabled by annotation", obj: object(workerPorts(corev1.ContainerPort{Name: "metrics", ContainerPort: 9601}).WithAnnotation(contract.AnnotationTaskD, "disabled"))},
		{name: "job opted out", obj: object(workerPorts(corev1.ContainerPort{Name: "metrics", ContainerPort: 9601}).WithAnnotation(contract.AnnotationInject, "disabled"))},
		{name: "not the training container", obj: object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) {
			side := builders.Container("exporter")
			side.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9601}}
			rs.Template.Spec.Containers = []corev1.Container{side, builders.Container("pytorch")}
		}))},
		{name: "training container picked by name", obj: object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) {
			train := builders.Container("pytorch")
			train.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9601}}
			rs.Template.Spec.Containers = []corev1.Container{builders.Container("exporter"), train}
		})), errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers[1].ports[0].containerPort"}},

		{name: "pod with TaskD port", obj: object(pod().Injected().WithPorts(taskdPort()))},
		{name: "pod with 9601 taken", obj: object(pod().Injected().WithPorts(corev1.ContainerPort{Name: "http", ContainerPort: 9601})),
			errs: []string{"spec.containers[0].ports[0].containerPort"}},
		{name: "pod trainguard did not inject may use 9601", obj: object(pod().WithPorts(corev1.ContainerPort{Name: "http", ContainerPort: 9601}))},
		{name: "pod first container when no name matches", obj: object(pod().Injected().With(func(p *corev1.Pod) { p.Spec.Containers[0].Name = "ascend-x" }).
			WithPorts(corev1.ContainerPort{Name: "taskd-port", ContainerPort: 1})), errs: []string{"spec.containers[0].ports[0].name"}},
		{name: "pod TaskD disabled", obj: object(pod().Injected().WithAnnotation(contract.AnnotationTaskD, "disabled").WithPorts(corev1.ContainerPort{Name: "http", ContainerPort: 9601}))},

		{name: "kubedl job with 9601 taken", obj: object(kubedlJob().With(func(j *kubedlv1alpha1.PyTorchJob) {
			j.Spec.PyTorchReplicaSpecs["Master"].Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "x", ContainerPort: 9601}}
		})), errs: []string{"spec.pytorchReplicaSpecs[Master].template.spec.containers[0].ports[0].containerPort"}},
	})
}

func TestTaskDPortFromConfig(t *testing.T) {
	cfg, _, err := config.Parse([]byte("taskd:\n  port: 9700\ntrainingContainer:\n  names: [trainer]\n"))
	assert.NoError(t, err)
	obj := object(pod().Injected().With(func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{builders.Container("pytorch"), builders.Container("trainer")}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "x", ContainerPort: 9700}} // not the training container
		p.Spec.Containers[1].Ports = []corev1.ContainerPort{{Name: "taskd-port", ContainerPort: 9601}}
	}))
	res, err := New(cfg).Validate(obj)
	assert.NoError(t, err)
	assert.Equal(t, []string{"spec.containers[1].ports[0].name"}, paths(res.Errors))
}

func TestNprocAboveGPULimit(t *testing.T) {
	withGPUs := func(n int64) *builders.KubeflowJobWrapper {
		return job().WithWorkerContainer(func(c *corev1.Container) { c.Resources = builders.GPULimit(n) })
	}
	const warning = "spec.nprocPerNode: 4 processes per node but container \"pytorch\" (spec.pytorchReplicaSpecs[Worker].template.spec.containers[0]) is limited to 2 nvidia.com/gpu"
	runRuleCases(t, []ruleCase{
		{name: "nproc equal to GPUs", obj: object(withGPUs(4).WithNproc("4")), noWarn: "processes per node"},
		{name: "nproc above GPUs", obj: object(withGPUs(2).WithNproc("4")), warn: warning},
		{name: "nproc auto", obj: object(withGPUs(2).WithNproc("auto")), noWarn: "processes per node"},
		{name: "no GPU limit (CPU training)", obj: object(job().WithNproc("4")), noWarn: "processes per node"},
		{name: "deprecated nProcPerNode above GPUs", obj: object(withGPUs(1).WithElastic(1, 1).WithCheckpointVolume().WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = builders.Ptr[int32](2) })),
			warn: "spec.elasticPolicy.nProcPerNode: 2 processes per node"},
		{name: "kubedl nProcPerNode above GPUs", obj: object(kubedlJob().With(func(j *kubedlv1alpha1.PyTorchJob) {
			j.Spec.ElasticPolicy.NProcPerNode = builders.Ptr[int32](8)
			j.Spec.PyTorchReplicaSpecs["Worker"].Template.Spec.Containers[0].Resources = builders.GPULimit(4)
		})), warn: "spec.elasticPolicy.nProcPerNode: 8 processes per node"},
	})
}

// TestEphemeralCheckpointWarning: every job or pod trainguard injects whose
// checkpoint directory would die with the pod is warned about (not only
// elastic jobs), and refused where the namespace requires durable ones.
func TestEphemeralCheckpointWarning(t *testing.T) {
	const warning = "checkpoints are not durable: /checkpoint is on the container's own filesystem"
	emptyDirAtPath := func(c *corev1.Container) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "scratch", MountPath: "/checkpoint"})
	}
	runRuleCases(t, []ruleCase{
		{name: "elastic job without claim", obj: object(job().WithElastic(1, 2)), warn: "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0]: " + warning},
		{name: "non-elastic job without claim", obj: object(job()), warn: "spec.pytorchReplicaSpecs[Master].template.spec.containers[0]: " + warning},
		{name: "kubedl job without claim", obj: object(kubedlJob()), warn: warning},
		{name: "job with checkpoint-claim", obj: object(job().WithElastic(1, 2).WithAnnotation(contract.AnnotationCheckpointClaim, "ckpt")), noWarn: "not durable"},
		{name: "checkpoint path on an emptyDir", obj: object(job().WithAnnotation(contract.AnnotationCheckpointClaim, "ckpt").WithWorkerContainer(emptyDirAtPath).
			With(func(j *kubeflowv1.PyTorchJob) {
				spec := &j.Spec.PyTorchReplicaSpecs[kubeflowv1.ReplicaWorker].Template.Spec
				spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			})), warn: `/checkpoint is on volume "scratch" (emptyDir)`},
		{name: "opted-out job", obj: object(job().WithAnnotation(contract.AnnotationInject, contract.InjectDisabled)), noWarn: "not durable"},
		{name: "required by the job itself", obj: object(job().WithAnnotation(contract.AnnotationRequireDurableCheckpoints, "true")),
			errs: []string{"spec.pytorchReplicaSpecs[Master].template.spec.containers[0].volumeMounts", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].volumeMounts"}},
	})
	// The namespace's claim counts, and its requirement refuses.
	res, err := New(nil).Validate(Object{GVK: job().GVK(), Raw: object(job().WithElastic(1, 2)).Raw,
		NamespaceAnnotations: map[string]string{contract.AnnotationCheckpointClaim: "team-ckpt"}})
	assert.NoError(t, err)
	assert.Empty(t, res.Warnings)
	res, err = New(nil).Validate(Object{GVK: job().GVK(), Raw: object(job().WithAnnotation(contract.AnnotationRequireDurableCheckpoints, "false")).Raw,
		NamespaceAnnotations: map[string]string{contract.AnnotationRequireDurableCheckpoints: "true"}})
	assert.NoError(t, err)
	if assert.Len(t, res.Errors, 2, "a job cannot lift its namespace's requirement") {
		assert.Contains(t, res.Errors[0].Error(), "trainguard.io/require-durable-checkpoints=true")
	}
}

func TestElasticStrategyWarning(t *testing.T) {
	const warning = "includes elastic-training but the job has no spec.elasticPolicy"
	runRuleCases(t, []ruleCase{
		{name: "elastic-training on elastic job", obj: object(job().WithElastic(1, 2).WithCheckpointVolume().WithAnnotation(contract.AnnotationRecoverStrategy, "recover,elastic-training")), noWarn: warning},
		{name: "elastic-training without policy", obj: object(job().WithAnnotation(contract.AnnotationRecoverStrategy, "recover,elastic-training")),
			warn: "metadata.annotations[trainguard.io/recover-strategy]: recover strategy \"recover,elastic-training\" " + warning},
		{name: "MindCluster annotation", obj: object(job().WithAnnotation("recover-strategy", "elastic-training")),
			warn: "metadata.annotations[recover-strategy]"},
		{name: "default strategy", obj: object(job()), noWarn: warning},
		{name: "kubedl without enableElastic", obj: object(kubedlJob().WithAnnotation("recover-strategy", "elastic-training").With(func(j *kubedlv1alpha1.PyTorchJob) {
			j.Spec.EnableElastic, j.Spec.ElasticPolicy = false, nil
		})), warn: warning},
	})
}

func TestNamespaceWarningsSurface(t *testing.T) {
	res, err := New(nil).Validate(Object{GVK: job().GVK(), Raw: object(job()).Raw,
		NamespaceAnnotations: map[string]string{contract.AnnotationGPULimit: "lots"}})
	assert.NoError(t, err)
	assert.Empty(t, res.Errors)
	if assert.NotEmpty(t, res.Warnings) {
		assert.Contains(t, res.Warnings[0], "namespace annotation trainguard.io/gpu-limit")
	}
}

// trainguard.io/in-process-recovery wraps the container's command: one
// without a command (the image's entrypoint, unknown here) is refused where
// the wrap would apply, at the field, never under torchrun.
func TestInProcessRecoveryNeedsACommand(t *testing.T) {
	on := func() *builders.KubeflowJobWrapper {
		return job().WithAnnotation(contract.AnnotationInProcessRecovery, contract.InjectEnabled)
	}
	withCommand := func(c *corev1.Container) { c.Command = []string{"python3", "train.py"} }
	runRuleCases(t, []ruleCase{
		{name: "no command: refused", obj: object(on().WithWorkerContainer(withCommand)),
			errs: []string{"spec.pytorchReplicaSpecs[Master].template.spec.containers[0].command"}},
		{name: "commands: admitted", obj: object(on().WithWorkerContainer(withCommand).WithReplica("Master", func(rs *kubeflowv1.ReplicaSpec) {
			withCommand(&rs.Template.Spec.Containers[0])
		}))},
		{name: "off: no command needed", obj: object(job())},
		{name: "elastic (torchrun): not wrapped, no command needed", obj: object(on().WithElastic(1, 1).WithoutReplica("Master"))},
		{name: "bad value", obj: object(job().WithAnnotation(contract.AnnotationInProcessRecovery, "yes").WithWorkerContainer(withCommand)),
			errs: []string{"metadata.annotations[trainguard.io/in-process-recovery]"}},
	})
}
