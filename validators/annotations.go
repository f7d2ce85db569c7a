package validators

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// validateMetadata checks the trainguard.io/ and MindCluster annotations and
// MindCluster's fault-scheduling label of one object or pod template.
// fldPath is the path of the metadata (metadata, or …template.metadata).
// The per-key rules live in package policy, so the config file, the
// mutating webhook and this webhook can never disagree on what is valid.
func validateMetadata(meta *metav1.ObjectMeta, fldPath *field.Path) field.ErrorList {
	return contract.ValidateMetadata(meta, fldPath)
}
