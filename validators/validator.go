// Package validators holds trainguard's validating rules: kubeflow's own
// PyTorchJob checks, the elastic policy (which no other webhook checks),
// the trainguard and MindCluster annotations, and cross-field checks on the
// object the mutating webhook produced. The validating webhook and
// `trainguard validate` both call Validator.Validate, so online and offline
// answers are the same.
package validators

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/policy"
)

// Object is one admission object to check.
type Object struct {
	GVK                  schema.GroupVersionKind
	Raw                  []byte            // JSON of the new object
	OldRaw               []byte            // JSON of the old object on UPDATE, nil on CREATE
	SubResource          string            // "status" → always allowed
	NamespaceAnnotations map[string]string // for policy.Resolve; nil offline
}

// Result is the outcome of one validation: errors refuse the object,
// warnings are returned to the client as admission warnings.
type Result struct {
	Errors   field.ErrorList
	Warnings []string
}

// Validator checks objects against the rules and the policy file.
type Validator struct {
	Config *policy.Config
}

// New returns a Validator for cfg; a nil cfg means policy.DefaultConfig().
func New(cfg *policy.Config) *Validator {
	if cfg == nil {
		cfg = policy.DefaultConfig()
	}
	return &Validator{Config: cfg}
}

// Handles reports whether Validate has rules for gvk.
func Handles(gvk schema.GroupVersionKind) bool { return checkerFor(gvk) != nil }

// checkFunc validates one decoded raw object of a kind.
type checkFunc func(v *Validator, raw []byte, nsAnnotations map[string]string) (Result, error)

func checkerFor(gvk schema.GroupVersionKind) checkFunc {
	switch gvk {
	case kubeflowv1.GroupVersion.WithKind(kubeflowv1.Kind):
		return (*Validator).checkKubeflowJob
	case kubedlv1alpha1.GroupVersion.WithKind(kubedlv1alpha1.Kind):
		return (*Validator).checkKubeDLJob
	case corev1.SchemeGroupVersion.WithKind("Pod"):
		return (*Validator).checkPod
	case corev1.SchemeGroupVersion.WithKind("Namespace"):
		return (*Validator).checkNamespace
	}
	return nil
}

// Validate checks obj. It returns an error only when Raw cannot be decoded
// as its kind; kinds it does not handle give an empty Result.
func (v *Validator) Validate(obj Object) (Result, error) {
	check := checkerFor(obj.GVK)
	// The status subresource carries no spec or metadata changes a user
	// could make invalid, and refusing it would wedge the operator.
	if check == nil || obj.SubResource == "status" {
		return Result{}, nil
	}
	res, err := check(v, obj.Raw, obj.NamespaceAnnotations)
	if err != nil {
		return Result{}, err
	}
	if len(obj.OldRaw) == 0 {
		return res, nil
	}
	// An UPDATE is refused only for problems the update introduces: an
	// object that was admitted before these rules existed (or before a
	// rule was tightened) must still be editable, e.g. to fix it.
	old, err := check(v, obj.OldRaw, obj.NamespaceAnnotations)
	if err != nil {
		// An undecodable old object cannot excuse anything; judge the new one alone.
		return res, nil
	}
	res.Errors = append(newErrors(res.Errors, old.Errors), updateRules(obj.GVK, obj.Raw, obj.OldRaw)...)
	return res, nil
}

// updateRules returns the errors of rules that compare old and new objects.
func updateRules(gvk schema.GroupVersionKind, raw, oldRaw []byte) field.ErrorList {
	if gvk == kubeflowv1.GroupVersion.WithKind(kubeflowv1.Kind) {
		return validateKubeflowUpdate(raw, oldRaw)
	}
	return nil
}

// newErrors drops from errs those already present in old: same type, same
// field path and same bad value. A changed bad value is a new error.
func newErrors(errs, old field.ErrorList) field.ErrorList {
	if len(errs) == 0 || len(old) == 0 {
		return errs
	}
	seen := make(map[string]bool, len(old))
	for _, e := range old {
		seen[errorKey(e)] = true
	}
	var out field.ErrorList
	for _, e := range errs {
		if !seen[errorKey(e)] {
			out = append(out, e)
		}
	}
	return out
}

func errorKey(e *field.Error) string {
	return fmt.Sprintf("%s\x00%s\x00%#v", e.Type, e.Field, e.BadValue)
}

// decode unmarshals raw into out the way the API server reads JSON:
// field names are case-sensitive, so `Replicas` is not `replicas`.
func decode(raw []byte, out interface{}, kind string) error {
	if len(raw) == 0 {
		return fmt.Errorf("decoding %s: empty object", kind)
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, out); err != nil {
		return fmt.Errorf("decoding %s: %w", kind, err)
	}
	return nil
}
