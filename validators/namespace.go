package validators

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateNamespace checks a Namespace's trainguard.io/ and MindCluster
// annotations and its fault-scheduling label. The Namespace webhook
// (CREATE/UPDATE) refuses a bad value the moment it is set, instead of every
// job in the namespace silently falling back to the defaults later.
func ValidateNamespace(ns *corev1.Namespace) field.ErrorList {
	if ns == nil {
		return nil
	}
	return validateMetadata(&ns.ObjectMeta, field.NewPath("metadata"))
}

func (v *Validator) checkNamespace(raw []byte, _ map[string]string) (Result, error) {
	ns := &corev1.Namespace{}
	if err := decode(raw, ns, "v1 Namespace"); err != nil {
		return Result{}, err
	}
	return Result{Errors: ValidateNamespace(ns)}, nil
}
