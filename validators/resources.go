package validators

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// extendedResourceErrors refuses what the API server refuses in a pod's
// resources, with its own message: an extended resource (nvidia.com/gpu,
// huawei.com/Ascend910) that is not a whole number. In a job's template
// nothing checks it until the operator creates the pods, which then all
// fail; refusing the job says so at once, and offline `validate` agrees.
func extendedResourceErrors(spec *corev1.PodSpec, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(containers []corev1.Container, path *field.Path) {
		for i := range containers {
			r := containers[i].Resources
			for _, list := range []struct {
				name string
				rl   corev1.ResourceList
			}{{"limits", r.Limits}, {"requests", r.Requests}} {
				for name, q := range list.rl {
					if isExtendedResource(name) && q.MilliValue()%1000 != 0 {
						errs = append(errs, field.Invalid(path.Index(i).Child("resources", list.name).Key(string(name)), q.String(),
							"must be an integer: an extended resource is counted in whole devices (the API server refuses the pod)"))
					}
				}
			}
		}
	}
	check(spec.InitContainers, specPath.Child("initContainers"))
	check(spec.Containers, specPath.Child("containers"))
	return errs
}

// isExtendedResource is the API server's test: a resource name with a
// domain outside kubernetes.io, and not a quota's requests.* name.
func isExtendedResource(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/") && !strings.HasPrefix(s, "requests.")
}

// gpuCountWarning warns of a pod asking for more accelerators than any
// node holds (the largest hold 8 to 16; trainguard's own gpu-limit stops at
// contract.MaxGPULimit): the pod would stay Pending forever.
func gpuCountWarning(p *contract.Policy, spec *corev1.PodSpec, specPath *field.Path) []string {
	var total, most int64
	largest := 0
	for i := range spec.Containers {
		if q, ok := spec.Containers[i].Resources.Limits[p.GPUResource]; ok {
			total += q.Value()
			if q.Value() > most {
				most, largest = q.Value(), i
			}
		}
	}
	if total <= contract.MaxGPULimit {
		return nil
	}
	return []string{fmt.Sprintf("%s: the pod asks for %d %s, more than any node holds (at most %d here); it would stay Pending: set the count per pod (per node), not per job",
		specPath.Child("containers").Index(largest).Child("resources", "limits").Key(string(p.GPUResource)), total, p.GPUResource, contract.MaxGPULimit)}
}
