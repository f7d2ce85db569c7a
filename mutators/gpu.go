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
	if !t.Policy.GPUForAll && (t.noAccelerator || !AcceleratorMeant(t.Policy, t.Spec)) {
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
	for _, list := range [][]string{c.Command, c.Args} {
		for _, w := range list {
			if acceleratorWord(w) {
				return true
			}
		}
	}
	for _, e := range c.Env {
		if acceleratorEnv(e.Name, e.Value) {
			return true
		}
	}
	return false
}

// acceleratorSigns are what, in a command line or NAME=value, says a
// process wants an accelerator: NCCL (GPU-only) or torchrun's
// --nproc-per-node=gpu (PET_NPROC_PER_NODE=gpu), in any case.
func acceleratorSigns() []string {
	return []string{"nccl", "nproc_per_node=gpu", "nproc-per-node=gpu"}
}

// acceleratorWord reports whether w shows a sign, without lowering a copy
// of it: every container's command, args and env are read on every
// admission. The signs are ASCII, which no other letter folds to.
func acceleratorWord(w string) bool {
	for _, sign := range acceleratorSigns() {
		if containsFold(w, sign) {
			return true
		}
	}
	return false
}

// acceleratorEnv is acceleratorWord(name + "=" + value) without joining
// them: a sign is in the name, in the value, or split at its "=" across
// the two (a name has no "=").
func acceleratorEnv(name, value string) bool {
	for _, sign := range acceleratorSigns() {
		if containsFold(name, sign) || containsFold(value, sign) {
			return true
		}
		if left, right, ok := strings.Cut(sign, "="); ok && hasSuffixFold(name, left) && hasPrefixFold(value, right) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains sub (ASCII, lower case) in any case.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if hasPrefixFold(s[i:], sub) {
			return true
		}
	}
	return false
}

// hasPrefixFold reports whether s starts with prefix (ASCII, lower case)
// in any case.
func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && hasPrefixFold(s[len(s)-len(suffix):], suffix)
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
