package mutators

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// GPU gives the training container the policy's accelerator count when it
// asks for none. Extended resources cannot be overcommitted, so requests
// always equal limits.
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
