package validators

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainguard/trainguard/internal/testing/builders"
)

// TestExtendedResourcesAreWholeAndPlausible: what the API server refuses
// in a pod's resources is refused in a job's templates too (its pods would
// all fail), and a GPU count no node holds is a warning.
func TestExtendedResourcesAreWholeAndPlausible(t *testing.T) {
	limits := func(rl corev1.ResourceList) func(*corev1.Container) {
		return func(c *corev1.Container) { c.Resources.Limits = rl }
	}
	q := resource.MustParse
	const worker = "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources."
	runRuleCases(t, []ruleCase{
		{name: "whole GPUs", obj: object(job().WithWorkerContainer(limits(corev1.ResourceList{"nvidia.com/gpu": q("2")})))},
		{name: "half a GPU", obj: object(job().WithWorkerContainer(limits(corev1.ResourceList{"nvidia.com/gpu": q("0.5")}))),
			errs: []string{worker + "limits[nvidia.com/gpu]"}},
		{name: "a fraction of an Ascend request", obj: object(job().WithWorkerContainer(func(c *corev1.Container) {
			c.Resources.Requests = corev1.ResourceList{"huawei.com/Ascend910": q("1500m")}
		})), errs: []string{worker + "requests[huawei.com/Ascend910]"}},
		{name: "fractional cpu and memory are fine", obj: object(job().WithWorkerContainer(limits(corev1.ResourceList{corev1.ResourceCPU: q("0.5"), corev1.ResourceMemory: q("1.5Gi")})))},
		{name: "a kubernetes.io resource is not extended", obj: object(job().WithWorkerContainer(limits(corev1.ResourceList{"example.kubernetes.io/thing": q("0.5")})))},
		{name: "an opted-out job's pods fail all the same", obj: object(job().WithAnnotation("trainguard.io/inject", "disabled").
			WithWorkerContainer(limits(corev1.ResourceList{"nvidia.com/gpu": q("0.5")}))), errs: []string{worker + "limits[nvidia.com/gpu]"}},
		{name: "a pod nobody injects", obj: object(pod().With(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "warm", Image: "x", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": q("0.1")}}}}
		})), errs: []string{"spec.initContainers[0].resources.limits[nvidia.com/gpu]"}},

		{name: "10,000 GPUs in a pod", obj: object(job().WithWorkerContainer(func(c *corev1.Container) { c.Resources = builders.GPULimit(10000) })),
			warn: "the pod asks for 10000 nvidia.com/gpu, more than any node holds"},
		{name: "64 GPUs in a pod", obj: object(job().WithWorkerContainer(func(c *corev1.Container) { c.Resources = builders.GPULimit(64) })),
			noWarn: "more than any node holds"},
		{name: "two containers add up", obj: object(pod().Injected().With(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = builders.GPULimit(40)
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "second", Image: "x", Resources: builders.GPULimit(40)})
		})), warn: "the pod asks for 80 nvidia.com/gpu"},
	})
}
