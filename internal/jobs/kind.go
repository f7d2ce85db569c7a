package jobs

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Adapter is one kind trainguard handles, its object type erased: the one
// place every capability a kind may have is declared. A capability the
// kind lacks is a nil func, an empty list or false, and callers check the
// field; nothing asks a kind or a job for its type. A kind's file is a
// function returning its Adapter; its funcs read the typed object with
// objectOf.
type Adapter struct {
	// GVK is the group, version and kind decoded.
	GVK schema.GroupVersionKind
	// Name is the short name in webhook names and metrics, e.g. "pytorchjob".
	Name string
	// Decode reads an admitted object of this kind.
	Decode func(raw []byte) (Job, error)
	// Validate runs the kind's own rules, which need no policy; nil gives
	// the generic ones (the trainguard annotations and labels of the
	// object and of each pod template).
	Validate func(job Job, env RuleEnv) Result
	// ValidateUpdate compares the new object with the old one on UPDATE.
	ValidateUpdate func(cur, old Job) field.ErrorList
	// Pod is set for the kind whose object is a pod: the end of the line,
	// injected pod by pod (node avoidance, whether it is a training pod at
	// all), not as a job with templates. It returns the pod.
	Pod func(job Job) *corev1.Pod
	// NotMutated says why trainguard validates this object but never
	// mutates it; "" (or nil) for an object it injects.
	NotMutated func(job Job) string
	// SharedByJobs: the object's templates serve many jobs with different
	// policies (Trainer's runtimes), so its policy cross-check only warns
	// (AdvisoryCrossCheck).
	SharedByJobs bool
	// JobNameLabels name the job's checkpoint directory (see JobNameLabel).
	JobNameLabels []JobNameLabel
	// JobOfPod finds the job of one of this kind's pods from its labels:
	// for pods with no controller owner (the operator's label is the
	// fallback), or whose controller is not the job (JobSet's batch Jobs).
	// JobLabels are the labels it reads (the rescheduler's cache keeps
	// only those).
	JobOfPod  func(pod *corev1.Pod) (PodOwner, bool)
	JobLabels []string
	// PodOwnerChain is how a pod's controller references lead to a job of
	// this kind: the kind itself when the job owns its pods, else each hop
	// (a TrainJob's pods: batch Job, JobSet, TrainJob). ownerchain follows
	// only these kinds, so a tenant's owner references lead nowhere else.
	PodOwnerChain []schema.GroupVersionKind
	// ClusterScoped: the kind has no namespace to opt in, so its objects
	// are validated wherever admitted.
	ClusterScoped bool
	// UncontrolledOnly: only objects without a controller owner are this
	// kind (batch/v1 Job: a CronJob's or a JobSet's Jobs stay theirs). A
	// pod's controller of this kind therefore says nothing about who
	// injects the pod, and an owner chain ends at it only when nothing
	// controls it.
	UncontrolledOnly bool
}

// Decoder is the Decode of a kind whose objects are a T: the one
// case-sensitive decoder (errors name the kind), then wrap, which makes
// the object's Job and may refuse it.
func Decoder[T any](gvk schema.GroupVersionKind, wrap func(*T) (Job, error)) func(raw []byte) (Job, error) {
	return func(raw []byte) (Job, error) {
		obj, err := decodeAs[T](gvk, raw)
		if err != nil {
			return nil, err
		}
		return wrap(obj)
	}
}

// objectOf is the typed object of a job its own kind decoded, for the
// kind's capabilities. Another kind's job is a caller's bug, which must
// not pass for an object without rules.
func objectOf[T any](job Job) *T {
	obj, ok := job.Object().(*T)
	if !ok {
		panic(fmt.Sprintf("jobs: a %T where a %T was decoded", job.Object(), obj))
	}
	return obj
}

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

// PodOwner is the job a pod belongs to, as the rescheduler names it.
type PodOwner struct {
	APIVersion string
	Kind       string
	Name       string
}
