package contract

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// AnnotationCheckpointKey names a job's checkpoint directory explicitly, for
// jobs that share state on purpose: every job (or pod) carrying the same key
// in one namespace uses <claim>/<namespace>/key/<key>/. Without it the
// directory is derived from the job's identity (docs/checkpoint-protocol.md).
const AnnotationCheckpointKey = Prefix + "checkpoint-key"

// ParseCheckpointKey checks a key: one DNS label (lowercase letters, digits
// and '-', at most 63 characters), so it is one safe path component: no
// '/', no "..", nothing absolute.
func ParseCheckpointKey(v string) (string, error) {
	if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
		return "", fmt.Errorf("must be a DNS label such as shared-pretrain (it names a directory): %s", strings.Join(errs, "; "))
	}
	return v, nil
}

// IsPathComponentSafe reports whether v may be used as one component of a
// path trainguard builds from tenant data: a DNS-1123 subdomain (which is what
// object names are) cannot be "." or "..", contains no '/' and no NUL.
func IsPathComponentSafe(v string) bool {
	return len(validation.IsDNS1123Subdomain(v)) == 0
}
