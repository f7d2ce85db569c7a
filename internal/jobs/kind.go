package jobs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Kind is the one generic adapter every built-in kind is: a kind's file is
// a function returning its Kind (what it is called, how its object becomes
// a Job, its own rules, its operator's job-name labels, how the
// rescheduler finds a pod's job) plus its Job type. Everything else asks
// the adapter through the optional interfaces below, never switches on a
// kind. T is the kind's typed object.
type Kind[T any] struct {
	// Of is the group, version and kind decoded.
	Of schema.GroupVersionKind
	// Short is the short name in webhook names and metrics, e.g. "pytorchjob".
	Short string
	// Wrap makes a Job of a decoded object; it may refuse the object.
	Wrap func(*T) (Job, error)
	// Rules are the kind's own rules, which need no policy; nil gives the
	// generic ones (the trainguard annotations and labels of the object and
	// of each pod template).
	Rules func(obj *T, env RuleEnv) Result
	// UpdateRules compare the new object with the old one on UPDATE.
	UpdateRules func(cur, old *T) field.ErrorList
	// NameLabels name the job's checkpoint directory (see JobNameLabel).
	NameLabels []JobNameLabel
	// FindJob is how the rescheduler finds the job of a pod of this kind
	// from the pod's labels; FindLabels are the labels it reads (the
	// rescheduler's cache keeps only those).
	FindJob    func(pod *corev1.Pod) (PodOwner, bool)
	FindLabels []string
	// OwnerChain is how a pod's controller references lead to a job of
	// this kind: the kind itself when the job owns its pods, else each hop
	// (a TrainJob's pods: batch Job, JobSet, TrainJob). ownerchain follows
	// only these kinds, so a tenant's owner references lead nowhere else.
	OwnerChain []schema.GroupVersionKind
	// Cluster: the kind is cluster-scoped.
	Cluster bool
	// Uncontrolled: only objects without a controller owner are this kind
	// (batch/v1 Job: a CronJob's or a JobSet's Jobs stay theirs). A pod's
	// controller of this kind therefore says nothing about who injects the
	// pod, and an owner chain ends at it only when nothing controls it.
	Uncontrolled bool
}

// GVK implements Adapter.
func (k Kind[T]) GVK() schema.GroupVersionKind { return k.Of }

// Name implements Adapter.
func (k Kind[T]) Name() string { return k.Short }

// Decode implements Adapter.
func (k Kind[T]) Decode(raw []byte) (Job, error) {
	obj, err := decodeAs[T](k.Of, raw)
	if err != nil {
		return nil, err
	}
	return k.Wrap(obj)
}

// ClusterScoped implements ClusterScoped.
func (k Kind[T]) ClusterScoped() bool { return k.Cluster }

// Validate implements Validating.
func (k Kind[T]) Validate(job Job, env RuleEnv) (Result, bool) {
	obj, ok := job.Object().(*T)
	if k.Rules == nil || !ok {
		return Result{}, false
	}
	return k.Rules(obj, env), true
}

// ValidateUpdate implements UpdateValidating.
func (k Kind[T]) ValidateUpdate(cur, old Job) field.ErrorList {
	c, okCur := cur.Object().(*T)
	o, okOld := old.Object().(*T)
	if k.UpdateRules == nil || !okCur || !okOld {
		return nil
	}
	return k.UpdateRules(c, o)
}

// JobNameLabels implements Labelled.
func (k Kind[T]) JobNameLabels() []JobNameLabel { return k.NameLabels }

// JobOfPod implements PodJobFinder.
func (k Kind[T]) JobOfPod(pod *corev1.Pod) (PodOwner, bool) {
	if k.FindJob == nil {
		return PodOwner{}, false
	}
	return k.FindJob(pod)
}

// PodOwnerChain implements OwnerChained.
func (k Kind[T]) PodOwnerChain() []schema.GroupVersionKind { return k.OwnerChain }

// UncontrolledOnly implements Uncontrolled.
func (k Kind[T]) UncontrolledOnly() bool { return k.Uncontrolled }

// JobLabels implements PodJobFinder.
func (k Kind[T]) JobLabels() []string { return k.FindLabels }

// Result is the outcome of one validation: errors refuse the object,
// warnings are returned to the client as admission warnings.
type Result struct {
	Errors   field.ErrorList
	Warnings []string
}

// RuleEnv is what a kind's rules may consult besides the object.
type RuleEnv struct {
	// Runtimes finds a TrainJob's runtime; nil skips the checks that need it.
	Runtimes RuntimeLookup
}

// Validating is implemented by adapters with rules of their own; ok is
// false when the kind has none and gets the generic ones.
type Validating interface {
	Validate(job Job, env RuleEnv) (res Result, ok bool)
}

// UpdateValidating is implemented by adapters with rules comparing the new
// object with the old one.
type UpdateValidating interface {
	ValidateUpdate(cur, old Job) field.ErrorList
}

// JobNameLabel is a label the kind's operator puts on each pod of a job,
// holding the job's name, and the env variable the kubelet copies it into.
// A job template's checkpoint directory is
// <kind>.<group>/$(Env)/$(Env)…, one component per label, so a job made
// with generateName gets its final name.
type JobNameLabel struct {
	Env   string
	Label string
	// FieldPath is the downward-API path of Label; NameLabel sets it, so
	// it is built once per kind, not per admitted template.
	FieldPath string
}

// NameLabel is a JobNameLabel with its FieldPath.
func NameLabel(env, label string) JobNameLabel {
	return JobNameLabel{Env: env, Label: label, FieldPath: "metadata.labels['" + label + "']"}
}

// Labelled is implemented by adapters whose operator labels the pods.
type Labelled interface {
	JobNameLabels() []JobNameLabel
}

// PodOwner is the job a pod belongs to, as the rescheduler names it.
type PodOwner struct {
	APIVersion string
	Kind       string
	Name       string
}

// PodJobFinder is implemented by adapters that know how to find the job of
// one of their pods from its labels: for pods with no controller owner
// (the operator's label is the fallback), or whose controller is not the
// job (JobSet's batch Jobs). JobLabels are the labels JobOfPod reads.
type PodJobFinder interface {
	JobOfPod(pod *corev1.Pod) (PodOwner, bool)
	JobLabels() []string
}

// OwnerChained is implemented by adapters of kinds that own pods, directly
// or through intermediate controllers (see Kind.OwnerChain).
type OwnerChained interface {
	PodOwnerChain() []schema.GroupVersionKind
}

// Uncontrolled is implemented by adapters whose kind is only its objects
// without a controller owner (see Kind.Uncontrolled).
type Uncontrolled interface {
	UncontrolledOnly() bool
}

// validateMetadata is contract.ValidateMetadata: one set of metadata rules
// for every kind (fldPath is the path of the metadata).
func validateMetadata(meta *metav1.ObjectMeta, fldPath *field.Path) field.ErrorList {
	return contract.ValidateMetadata(meta, fldPath)
}
