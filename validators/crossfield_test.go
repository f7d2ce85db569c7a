package validators

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/contract"
	"github.com/trainguard/trainguard/internal/policy"
)

func taskdPort() corev1.ContainerPort {
	return corev1.ContainerPort{Name: "taskd-port", ContainerPort: 9601}
}

func TestTaskDPortRules(t *testing.T) {
	workerPorts := func(ports ...corev1.ContainerPort) *kfJob {
		return job().withWorkerContainer(func(c *corev1.Container) { c.Ports = ports })
	}
	const ports = "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports"
	runRuleCases(t, []ruleCase{
		{name: "injected TaskD port", obj: workerPorts(taskdPort(), corev1.ContainerPort{Name: "pytorchjob-port", ContainerPort: 23456}).object()},
		{name: "9601 under another name", obj: workerPorts(corev1.ContainerPort{Name: "metrics", ContainerPort: 9601}).object(),
			errs: []string{ports + "[0].containerPort"}},
		{name: "9601 without a name", obj: workerPorts(taskdPort(), corev1.ContainerPort{ContainerPort: 9601}).object(),
			errs: []string{ports + "[1].containerPort"}},
		{name: "taskd-port on another number", obj: workerPorts(corev1.ContainerPort{Name: "taskd-port", ContainerPort: 9000}).object(),
			errs: []string{ports + "[0].name"}},
		{name: "TaskD disabled by annotation", obj: workerPorts(corev1.ContainerPort{Name: "metrics", ContainerPort: 9601}).withAnnotation(contract.AnnotationTaskD, "disabled").object()},
		{name: "job opted out", obj: workerPorts(corev1.ContainerPort{Name: "metrics", ContainerPort: 9601}).withAnnotation(contract.AnnotationInject, "disabled").object()},
		{name: "not the training container", obj: job().withReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) {
			side := container("exporter")
			side.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9601}}
			rs.Template.Spec.Containers = []corev1.Container{side, container("pytorch")}
		}).object()},
		{name: "training container picked by name", obj: job().withReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) {
			train := container("pytorch")
			train.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9601}}
			rs.Template.Spec.Containers = []corev1.Container{container("exporter"), train}
		}).object(), errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers[1].ports[0].containerPort"}},

		{name: "pod with TaskD port", obj: pod().injected().withPorts(taskdPort()).object()},
		{name: "pod with 9601 taken", obj: pod().injected().withPorts(corev1.ContainerPort{Name: "http", ContainerPort: 9601}).object(),
			errs: []string{"spec.containers[0].ports[0].containerPort"}},
		{name: "pod trainguard did not inject may use 9601", obj: pod().withPorts(corev1.ContainerPort{Name: "http", ContainerPort: 9601}).object()},
		{name: "pod first container when no name matches", obj: pod().injected().with(func(p *corev1.Pod) { p.Spec.Containers[0].Name = "ascend-x" }).
			withPorts(corev1.ContainerPort{Name: "taskd-port", ContainerPort: 1}).object(), errs: []string{"spec.containers[0].ports[0].name"}},
		{name: "pod TaskD disabled", obj: pod().injected().withAnnotation(contract.AnnotationTaskD, "disabled").withPorts(corev1.ContainerPort{Name: "http", ContainerPort: 9601}).object()},

		{name: "kubedl job with 9601 taken", obj: kubedlJob().with(func(j *kubedlv1alpha1.PyTorchJob) {
			j.Spec.PyTorchReplicaSpecs["Master"].Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "x", ContainerPort: 9601}}
		}).object(), errs: []string{"spec.pytorchReplicaSpecs[Master].template.spec.containers[0].ports[0].containerPort"}},
	})
}

func TestTaskDPortFromConfig(t *testing.T) {
	cfg, err := policy.ParseConfig([]byte("taskd:\n  port: 9700\ntrainingContainer:\n  names: [trainer]\n"))
	assert.NoError(t, err)
	obj := pod().injected().with(func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{container("pytorch"), container("trainer")}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "x", ContainerPort: 9700}} // not the training container
		p.Spec.Containers[1].Ports = []corev1.ContainerPort{{Name: "taskd-port", ContainerPort: 9601}}
	}).object()
	res, err := New(cfg).Validate(obj)
	assert.NoError(t, err)
	assert.Equal(t, []string{"spec.containers[1].ports[0].name"}, paths(res.Errors))
}

func TestNprocAboveGPULimit(t *testing.T) {
	withGPUs := func(n int64) *kfJob {
		return job().withWorkerContainer(func(c *corev1.Container) { c.Resources = gpuLimit(n) })
	}
	const warning = "spec.nprocPerNode: 4 processes per node but container \"pytorch\" (spec.pytorchReplicaSpecs[Worker].template.spec.containers[0]) is limited to 2 nvidia.com/gpu"
	runRuleCases(t, []ruleCase{
		{name: "nproc equal to GPUs", obj: withGPUs(4).withNproc("4").object(), noWarn: "processes per node"},
		{name: "nproc above GPUs", obj: withGPUs(2).withNproc("4").object(), warn: warning},
		{name: "nproc auto", obj: withGPUs(2).withNproc("auto").object(), noWarn: "processes per node"},
		{name: "no GPU limit (CPU training)", obj: job().withNproc("4").object(), noWarn: "processes per node"},
		{name: "deprecated nProcPerNode above GPUs", obj: withGPUs(1).withElastic(1, 1).withCheckpointVolume().withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = ptr[int32](2) }).object(),
			warn: "spec.elasticPolicy.nProcPerNode: 2 processes per node"},
		{name: "kubedl nProcPerNode above GPUs", obj: kubedlJob().with(func(j *kubedlv1alpha1.PyTorchJob) {
			j.Spec.ElasticPolicy.NProcPerNode = ptr[int32](8)
			j.Spec.PyTorchReplicaSpecs["Worker"].Template.Spec.Containers[0].Resources = gpuLimit(4)
		}).object(), warn: "spec.elasticPolicy.nProcPerNode: 8 processes per node"},
	})
}

func TestCheckpointVolumeWarning(t *testing.T) {
	const warning = "rescheduled workers restart from scratch"
	runRuleCases(t, []ruleCase{
		{name: "elastic job with checkpoint volume", obj: job().withElastic(1, 2).withCheckpointVolume().object(), noWarn: warning},
		{name: "elastic job with checkpoint-claim", obj: job().withElastic(1, 2).withAnnotation(contract.AnnotationCheckpointClaim, "ckpt").object(), noWarn: warning},
		{name: "elastic job without checkpoint", obj: job().withElastic(1, 2).object(), warn: "spec.elasticPolicy: the job is elastic but has no checkpoint volume: " + warning},
		{name: "non-elastic job", obj: job().object(), noWarn: warning},
		{name: "kubedl elastic job without checkpoint", obj: kubedlJob().object(), warn: warning},
	})
	// The namespace's claim counts too.
	res, err := New(nil).Validate(Object{GVK: job().j.GroupVersionKind(), Raw: job().withElastic(1, 2).object().Raw,
		NamespaceAnnotations: map[string]string{contract.AnnotationCheckpointClaim: "team-ckpt"}})
	assert.NoError(t, err)
	assert.Empty(t, res.Warnings)
}

func TestElasticStrategyWarning(t *testing.T) {
	const warning = "includes elastic-training but the job has no spec.elasticPolicy"
	runRuleCases(t, []ruleCase{
		{name: "elastic-training on elastic job", obj: job().withElastic(1, 2).withCheckpointVolume().withAnnotation(contract.AnnotationRecoverStrategy, "recover,elastic-training").object(), noWarn: warning},
		{name: "elastic-training without policy", obj: job().withAnnotation(contract.AnnotationRecoverStrategy, "recover,elastic-training").object(),
			warn: "metadata.annotations[trainguard.io/recover-strategy]: recover strategy \"recover,elastic-training\" " + warning},
		{name: "MindCluster annotation", obj: job().withAnnotation("recover-strategy", "elastic-training").object(),
			warn: "metadata.annotations[recover-strategy]"},
		{name: "default strategy", obj: job().object(), noWarn: warning},
		{name: "kubedl without enableElastic", obj: kubedlJob().withAnnotation("recover-strategy", "elastic-training").with(func(j *kubedlv1alpha1.PyTorchJob) {
			j.Spec.EnableElastic, j.Spec.ElasticPolicy = false, nil
		}).object(), warn: warning},
	})
}

func TestNamespaceWarningsSurface(t *testing.T) {
	res, err := New(nil).Validate(Object{GVK: job().j.GroupVersionKind(), Raw: job().object().Raw,
		NamespaceAnnotations: map[string]string{contract.AnnotationGPULimit: "lots"}})
	assert.NoError(t, err)
	assert.Empty(t, res.Errors)
	if assert.Len(t, res.Warnings, 1) {
		assert.Contains(t, res.Warnings[0], "namespace annotation trainguard.io/gpu-limit")
	}
}
