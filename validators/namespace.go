package validators

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// ValidateNamespace checks a Namespace's trainguard.io/ and MindCluster
// annotations and its fault-scheduling label. The Namespace webhook
// (CREATE/UPDATE) refuses a bad value the moment it is set, instead of every
// job in the namespace silently falling back to the defaults later.
func ValidateNamespace(ns *corev1.Namespace) field.ErrorList {
	if ns == nil {
		return nil
	}
	return contract.ValidateMetadata(&ns.ObjectMeta, field.NewPath("metadata"))
}

func checkNamespace(raw []byte, _ map[string]string) (Result, error) {
	ns := &corev1.Namespace{}
	if len(raw) == 0 {
		return Result{}, fmt.Errorf("decoding v1 Namespace: empty object")
	}
	if err := jobs.Decode(raw, ns); err != nil {
		return Result{}, fmt.Errorf("decoding v1 Namespace: %w", err)
	}
	return Result{Errors: ValidateNamespace(ns)}, nil
}
