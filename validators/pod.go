package validators

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/contract"
)

// checkPod validates a Pod: its annotations and labels, and, as the pod
// looks after the mutating webhook ran, that the TaskD port is not taken.
// Pods cover bare torchelastic pods and pods of any other controller.
func (v *Validator) checkPod(raw []byte, nsAnnotations map[string]string) (Result, error) {
	pod := &corev1.Pod{}
	if err := decode(raw, pod, "v1 Pod"); err != nil {
		return Result{}, err
	}
	metaPath := field.NewPath("metadata")
	res := Result{Errors: validateMetadata(&pod.ObjectMeta, metaPath)}
	// Cross-field checks hold only for pods trainguard injected (the mutating
	// webhook ran first and left its marker). Any other pod in the namespace,
	// an etcd for the rendezvous or the pods of an opted-out job, owes
	// TaskD nothing and must not be refused for it.
	if contract.OptedOut(pod.Annotations) || !contract.Injected(pod.Annotations) {
		return res, nil
	}
	p, warnings := v.resolve(nsAnnotations, pod.Annotations)
	res.Warnings = append(res.Warnings, warnings...)
	res.Errors = append(res.Errors, checkTaskDPort(p, &pod.Spec, field.NewPath("spec"))...)
	return res, nil
}
