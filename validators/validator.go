// Package validators holds trainguard's validating rules: kubeflow's own
// PyTorchJob checks, the elastic policy (which no other webhook checks),
// the trainguard and MindCluster annotations, and cross-field checks on the
// object the mutating webhook produced. The validating webhook and
// `trainguard validate` both call Validator.Validate, so online and offline
// answers are the same. What the webhook acts on is a typed finding
// (Result.EphemeralCheckpoints), never a parsed message.
package validators

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/jobs"
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
// warnings are returned to the client as admission warnings. What the
// webhook acts on beyond its answer is a typed finding beside them, never
// read back out of a message (messages quote tenant-written values).
type Result struct {
	Errors   field.ErrorList
	Warnings []string
	// EphemeralCheckpoints are the pod templates (or pods) whose
	// checkpoints die with the pod, each warned about or refused; the
	// webhook records an Event and a metric for them.
	EphemeralCheckpoints []EphemeralCheckpoint
}

// EphemeralCheckpoint is one pod template (or pod) whose training
// container checkpoints to storage that is deleted with the pod.
type EphemeralCheckpoint struct {
	// Container is the training container's field path.
	Container *field.Path
	// Refused is set when it was refused (durable checkpoints required),
	// unset when it was only warned about.
	Refused bool
}

// fromRules is a kind's own rules' outcome as a Result.
func fromRules(r jobs.Result) Result { return Result{Errors: r.Errors, Warnings: r.Warnings} }

// RuntimeLookup finds the runtime a TrainJob refers to (jobs.RuntimeLookup).
type RuntimeLookup = jobs.RuntimeLookup

// Validator checks objects against the rules and the policy file.
type Validator struct {
	Config *configv1alpha1.Configuration
	// Runtimes finds a TrainJob's runtime; nil skips the checks that need it.
	Runtimes RuntimeLookup
	// TrainJobs reads a trainer pod's TrainJob; nil checks pods on their own.
	TrainJobs TrainJobAnnotations
	kinds     jobs.Kinds
}

// New returns a Validator for cfg and the built-in kinds; a nil cfg means
// configv1alpha1.Default().
func New(cfg *configv1alpha1.Configuration) *Validator {
	if cfg == nil {
		cfg = configv1alpha1.Default()
	}
	return &Validator{Config: cfg, kinds: jobs.Builtin()}
}

// WithKinds makes v validate kinds instead of the built-in ones; nil keeps them.
func (v *Validator) WithKinds(kinds *jobs.Kinds) *Validator {
	if kinds != nil {
		v.kinds = *kinds
	}
	return v
}

// Handles reports whether Validate has rules for gvk.
func (v *Validator) Handles(gvk schema.GroupVersionKind) bool { return v.checkerFor(gvk) != nil }

// checkFunc validates one raw object of a kind.
type checkFunc func(raw []byte, nsAnnotations map[string]string) (Result, error)

// checkerFor returns the check for gvk: every job kind goes through its
// adapter, Namespaces have their own; nil for kinds without rules.
func (v *Validator) checkerFor(gvk schema.GroupVersionKind) checkFunc {
	if gvk == corev1.SchemeGroupVersion.WithKind("Namespace") {
		return checkNamespace
	}
	a, ok := v.kinds.For(gvk)
	if !ok {
		return nil
	}
	return func(raw []byte, nsAnnotations map[string]string) (Result, error) {
		job, err := a.Decode(raw)
		if err != nil {
			return Result{}, err
		}
		return v.checkJob(a, job, nsAnnotations), nil
	}
}

// Validate checks obj. It returns an error only when Raw cannot be decoded
// as its kind; kinds it does not handle give an empty Result.
func (v *Validator) Validate(obj Object) (Result, error) {
	check := v.checkerFor(obj.GVK)
	// The status subresource carries no spec or metadata changes a user
	// could make invalid, and refusing it would wedge the operator.
	if check == nil || obj.SubResource == "status" {
		return Result{}, nil
	}
	res, err := check(obj.Raw, obj.NamespaceAnnotations)
	if err != nil {
		return Result{}, err
	}
	if len(obj.OldRaw) == 0 {
		return res, nil
	}
	// An UPDATE is refused only for problems the update introduces: an
	// object that was admitted before these rules existed (or before a
	// rule was tightened) must still be editable, e.g. to fix it.
	old, err := check(obj.OldRaw, obj.NamespaceAnnotations)
	if err != nil {
		// An undecodable old object cannot excuse anything; judge the new one alone.
		return res, nil
	}
	res.Errors = append(newErrors(res.Errors, old.Errors), v.updateRules(obj.GVK, obj.Raw, obj.OldRaw)...)
	return res, nil
}

// updateRules returns the errors of the kind's rules that compare the old
// and new objects; the adapter has them.
func (v *Validator) updateRules(gvk schema.GroupVersionKind, raw, oldRaw []byte) field.ErrorList {
	a, ok := v.kinds.For(gvk)
	if !ok || a.ValidateUpdate == nil {
		return nil
	}
	cur, errCur := a.Decode(raw)
	old, errOld := a.Decode(oldRaw)
	if errCur != nil || errOld != nil {
		return nil
	}
	return a.ValidateUpdate(cur, old)
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
