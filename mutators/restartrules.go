package mutators

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// torchrun (torch.distributed.run) reads its flags from PET_* env: the
// Trainer's torch runtime and the training operator's elastic policy set the
// rendezvous ones, neither sets these.
const (
	// EnvTorchrunMaxRestarts: how often torchrun restarts all its local
	// workers after one failed, in place, before it fails (default 0).
	EnvTorchrunMaxRestarts = "PET_MAX_RESTARTS"
	// EnvTorchrunMonitorInterval: how often (s) torchrun looks at its
	// workers (default 5): a dead rank is noticed within it.
	EnvTorchrunMonitorInterval = "PET_MONITOR_INTERVAL"
	torchrunMonitorInterval    = "1"
)

// RestartRules restarts every rank of a job in place after a process fault
// (contract.ProcessFaultExitCodes: SIGKILL, the SDK's peer-lost exit,
// SIGSEGV), where the effective recover-strategy lists recover-in-place:
//
//   - The training container gets container restart rules (KEP-5307) for
//     those codes where the pod's restartPolicy would not restart them
//     (kubeflow's ExitCode and a Job's pods run with Never): the kubelet
//     restarts it on its node, and the operator, which would have retried
//     those codes anyway (kubeflow retries every code >= 128), never sees a
//     failed pod. The rules need the container's restartPolicy set, and only
//     the pod (not a job's template) has its final restartPolicy: decided
//     per pod. An API server without the ContainerRestartRules feature
//     (before 1.35, or switched off) drops both fields; the pod then
//     restarts as before.
//   - torchrun, when it is the launcher (a TrainJob), restarts all its local
//     workers in place after one died, up to the job's reschedule cap
//     (PET_MAX_RESTARTS), noticing within a second (PET_MONITOR_INTERVAL);
//     its container never stops. Values the user or the operator set win.
//
// Neither once the rescheduler stopped the job's in-place restarts at its
// cap (Target.InPlaceStopped).
func RestartRules(t *Target) bool {
	c := t.TrainingContainer()
	if c == nil || !contract.HasStrategy(contract.RecoverStrategyOf(t.Meta.Annotations, t.Policy.RecoverStrategy), contract.StrategyRecoverInPlace) {
		return false
	}
	if t.InPlaceStopped {
		// The job's in-place restarts reached its cap: its restart policy
		// decides from here. Only the record (trainguard's) says so; a
		// tenant can only make this stricter (a recover-strategy without
		// recover-in-place), never lift it.
		t.Warnf("the job's in-place restarts reached its cap (trainguard.io/max-reschedules): no restart rules, the pod's restartPolicy decides")
		return false
	}
	ensureEnv(c, corev1.EnvVar{Name: EnvTorchrunMaxRestarts, Value: strconv.Itoa(t.Policy.MaxReschedules)})
	ensureEnv(c, corev1.EnvVar{Name: EnvTorchrunMonitorInterval, Value: torchrunMonitorInterval})
	want := contract.InPlaceRestartRules()
	switch {
	case equality.Semantic.DeepEqual(c.RestartPolicyRules, want):
	case len(c.RestartPolicyRules) > 0 || c.RestartPolicy != nil:
		t.Warnf("container %q sets its own restartPolicy or restartPolicyRules; in-place restart rules not injected (they are kept as written)", c.Name)
	case slices.ContainsFunc(contract.ProcessFaultExitCodes(), func(code int32) bool { return !contract.RestartsInPlace(t.Spec, c.Name, code) }):
		// Only where the pod's policy would not restart every process
		// fault already (OnFailure and Always do).
		policy := corev1.ContainerRestartPolicy(t.Spec.RestartPolicy)
		c.RestartPolicy = &policy
		c.RestartPolicyRules = want
	}
	return true
}
