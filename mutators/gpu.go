package mutators

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// GPU gives the training container the policy's accelerator count when it
// asks for none, but only where an accelerator is meant (see
// AcceleratorMeant): a CPU job (gloo, or no backend named, and no
// accelerator anywhere) would otherwise stay Pending forever on a CPU node
// pool. Extended resources cannot be overcommitted, so requests always
// equal limits.
func GPU(t *Target) bool {
	c := t.TrainingContainer()
	n := t.Policy.GPUCount
	name := t.Policy.GPUResource
	if n == 0 || c == nil {
		return false
	}
	limit, hasLimit := c.Resources.Limits[name]
	request, hasRequest := c.Resources.Requests[name]
	switch {
	case hasLimit && hasRequest:
		if limit.Cmp(request) != 0 {
			t.Warnf("container %q requests %s %s but limits %s; extended resources need requests equal to limits", c.Name, request.String(), name, limit.String())
		}
		return false
	case hasLimit:
		// The API server defaults requests from limits; nothing to add.
		return false
	case hasRequest:
		setResource(&c.Resources.Limits, name, request)
		return true
	}
	if !t.Policy.GPUForAll && !AcceleratorMeant(t.Policy, t.Spec) {
		return false
	}
	q := *resource.NewQuantity(n, resource.DecimalSI)
	setResource(&c.Resources.Limits, name, q)
	setResource(&c.Resources.Requests, name, q)
	return true
}

func setResource(list *corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	if *list == nil {
		*list = corev1.ResourceList{}
	}
	(*list)[name] = q
}

// AcceleratorMeant reports whether pod specs (all templates of one job)
// show that the job wants an accelerator: a container or init container
// asks for the policy's GPU resource or another vendor's accelerator, a
// container names the NCCL backend (GPU-only) or --nproc-per-node=gpu, or
// the pod tolerates or selects accelerator nodes. Nothing of this means a
// CPU job (gloo, or no backend named, which torch runs on gloo without CUDA).
func AcceleratorMeant(p *contract.Policy, specs ...*corev1.PodSpec) bool {
	for _, s := range specs {
		if s != nil && specWantsAccelerator(p, s) {
			return true
		}
	}
	return false
}

func specWantsAccelerator(p *contract.Policy, s *corev1.PodSpec) bool {
	for i := range s.Tolerations {
		if isAccelerator(p, corev1.ResourceName(s.Tolerations[i].Key)) {
			return true
		}
	}
	for key := range s.NodeSelector {
		if isAccelerator(p, corev1.ResourceName(key)) {
			return true
		}
	}
	for _, list := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range list {
			if containerWantsAccelerator(p, &list[i]) {
				return true
			}
		}
	}
	return false
}

func containerWantsAccelerator(p *contract.Policy, c *corev1.Container) bool {
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name := range l {
			if isAccelerator(p, name) {
				return true
			}
		}
	}
	words := append(append([]string{}, c.Command...), c.Args...)
	for _, e := range c.Env {
		words = append(words, e.Name+"="+e.Value)
	}
	for _, w := range words {
		w = strings.ToLower(w)
		if strings.Contains(w, "nccl") || strings.Contains(w, "nproc_per_node=gpu") || strings.Contains(w, "nproc-per-node=gpu") ||
			w == "pet_nproc_per_node=gpu" {
			return true
		}
	}
	return false
}

// acceleratorVendors are resource (and node label/taint key) prefixes of
// accelerator device plugins.
func acceleratorVendors() []string {
	return []string{"nvidia.com/", "amd.com/", "gpu.intel.com/", "habana.ai/", "huawei.com/ascend", "aws.amazon.com/neuron", "google.com/tpu", "cloud.google.com/gke-accelerator"}
}

func isAccelerator(p *contract.Policy, name corev1.ResourceName) bool {
	if name == p.GPUResource {
		return true
	}
	lower := strings.ToLower(string(name))
	for _, v := range acceleratorVendors() {
		if strings.HasPrefix(lower, v) {
			return true
		}
	}
	return false
}
