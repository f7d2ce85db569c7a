package mutators

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/version"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

// target builds a Target around a pod spec, kueue-style.
type targetBuilder struct {
	meta metav1.ObjectMeta
	spec corev1.PodSpec
	pol  *contract.Policy
	// kind and podPolicy: a job's template (template).
	kind      schema.GroupKind
	podPolicy corev1.RestartPolicy
}

func newTarget(containers ...string) *targetBuilder {
	b := &targetBuilder{}
	for _, c := range containers {
		b.spec.Containers = append(b.spec.Containers, builders.Container(c))
	}
	b.pol = defaultPolicy()
	b.pol.CheckpointClaim = "ckpt"
	return b
}

// defaultPolicy is what policy.Resolve makes of the default configuration
// (internal/config imports this package for the injection registry's
// names, so these tests cannot import policy).
func defaultPolicy() *contract.Policy {
	return &contract.Policy{
		CheckpointPath: "/checkpoint", PreStopTimeout: 60 * time.Second, GracePeriodMargin: 30 * time.Second,
		TaskD: true, TaskDPort: 9601, RecoverStrategy: "recover-in-place,recover", FaultScheduling: "grace",
		GPUResource: "nvidia.com/gpu", GPUCount: 1, AgentImage: version.Image, AgentPullPolicy: corev1.PullIfNotPresent,
		AgentPath: "/opt/trainguard/bin", AgentInstall: []string{"/" + contract.AgentBinaryName, "install"},
		TrainingContainers: []string{"pytorch", "ascend"}, MaxReschedules: 10,
	}
}

func (b *targetBuilder) with(f func(*corev1.PodSpec)) *targetBuilder { f(&b.spec); return b }

// template makes it a kubeflow PyTorchJob's template whose pods run with
// podPolicy ("" where the kind cannot tell).
func (b *targetBuilder) template(podPolicy corev1.RestartPolicy) *targetBuilder {
	b.kind, b.podPolicy = schema.GroupKind{Group: "kubeflow.org", Kind: "PyTorchJob"}, podPolicy
	return b
}

func (b *targetBuilder) policy(f func(*contract.Policy)) *targetBuilder { f(b.pol); return b }

func (b *targetBuilder) grace(s int64) *targetBuilder {
	b.spec.TerminationGracePeriodSeconds = &s
	return b
}

func (b *targetBuilder) preStop(h *corev1.LifecycleHandler) *targetBuilder {
	b.spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: h}
	return b
}

func (b *targetBuilder) build() *Target {
	return &Target{Meta: &b.meta, Spec: &b.spec, Policy: b.pol, Kind: b.kind, PodRestartPolicy: b.podPolicy}
}

func gpu(n string) corev1.ResourceList {
	return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}
}

func minutes(n int) time.Duration { return time.Duration(n) * time.Minute }
