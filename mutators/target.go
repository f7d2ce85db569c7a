// Package mutators holds trainguard's injections. Each works on one pod
// template or pod (a Target), is switchable on its own, and is idempotent:
// applying it to its own output changes nothing, because the API server may
// reinvoke the webhook. admit.go is the whole chain, called once per
// object; registry.go is the one registry of injections (name, function,
// order) the chain and the marker come from, which tests tie to
// contract.InjectionNames and to the chart schema's enum.
package mutators

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// Target is one pod template or pod being mutated, with the policy that
// applies to it and the warnings the mutation produced.
type Target struct {
	Meta   *metav1.ObjectMeta
	Spec   *corev1.PodSpec
	Policy *contract.Policy
	// Where names the target in warnings, e.g. "spec.pytorchReplicaSpecs[Worker].template".
	Where string
	// Kind is the group and kind of the job a template belongs to (empty
	// for a pod): it names the job's checkpoint directory, so that two
	// kinds' jobs of the same name never share one.
	Kind schema.GroupKind
	// JobNameLabels are the labels the kind's operator puts on each pod with
	// the job's name (from the kind's adapter); they name the job's
	// checkpoint directory below Kind's.
	JobNameLabels []jobs.JobNameLabel
	// noAccelerator: the job's templates were all looked at for an
	// accelerator (MutateJob) and none wants one, so GPU need not look again.
	noAccelerator bool
	// PodRestartPolicy is, for a job's template, the restartPolicy its pods
	// will run with when the kind lets it be known at admission
	// (jobs.Template.PodRestartPolicy); empty when only each pod knows.
	PodRestartPolicy corev1.RestartPolicy
	// InPlaceStopped: the rescheduler stopped the in-place restarts of the
	// pod's job at its cap (its record, which no tenant can write); the pod
	// gets no restart rules (RestartRules).
	InPlaceStopped bool
	// Torchrun: the job's operator launches its trainers with torchrun
	// (an elastic PyTorchJob): the supervisor goes into its workers
	// (InProcess).
	Torchrun bool
	warnings []string
}

// isTemplate says t is a job's pod template, not a pod (a template has
// its job's Kind).
func (t *Target) isTemplate() bool { return !t.Kind.Empty() }

// podRestartPolicy is the restartPolicy t's pods run with: a pod's own,
// a template's PodRestartPolicy; known is false where a template cannot
// tell.
func (t *Target) podRestartPolicy() (policy corev1.RestartPolicy, known bool) {
	if !t.isTemplate() {
		return t.Spec.RestartPolicy, true
	}
	return t.PodRestartPolicy, t.PodRestartPolicy != ""
}

// Warnf records an admission warning. Every conflict that makes a mutator
// skip must say so: the user should never wonder why something is missing.
func (t *Target) Warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if t.Where != "" {
		msg = t.Where + ": " + msg
	}
	t.warnings = append(t.warnings, msg)
}

// Warnings returns what the mutation had to say.
func (t *Target) Warnings() []string { return t.warnings }

// TrainingContainer returns the container trainguard injects into: the first
// whose name is in the policy's list, in list order, else the first one.
func (t *Target) TrainingContainer() *corev1.Container {
	i := contract.TrainingContainer(t.Spec, t.Policy.TrainingContainers)
	if i < 0 {
		return nil
	}
	return &t.Spec.Containers[i]
}

func setIfAbsent(m *map[string]string, key, value string) {
	if *m == nil {
		*m = map[string]string{}
	}
	if _, ok := (*m)[key]; !ok {
		(*m)[key] = value
	}
}
