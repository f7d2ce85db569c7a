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
//     those codes where the pods' restartPolicy would not restart them
//     (kubeflow's ExitCode and a Job's pods run with Never): the kubelet
//     restarts it on its node, and the operator, which would have retried
//     those codes anyway (kubeflow retries every code >= 128), never sees a
//     failed pod. The rules need the container's restartPolicy set to the
//     pod's, so they go where that is known: every pod, and a job's
//     template whose kind tells its pods' restartPolicy at admission
//     (Target.PodRestartPolicy). An API server without the
//     ContainerRestartRules feature (before 1.35, or switched off) drops
//     both fields; the pod then restarts as before.
//   - torchrun, when it is the launcher (a TrainJob), restarts all its local
//     workers in place after one died, up to the job's reschedule cap
//     (PET_MAX_RESTARTS), noticing within a second (PET_MONITOR_INTERVAL);
//     its container never stops. Values the user or the operator set win.
//
// A job's template carries all of it (RestartRulesInTemplate) so that the
// operator's pods, created from it, need no patch: the API server re-runs
// every mutating webhook on a pod any webhook changed, which costs a burst
// of pods more than the webhook's own work (docs/scale.md). Each pod then
// only checks it (this function, again): it completes what the template
// could not know, and removes trainguard's part where the pod must not
// restart in place: the rescheduler stopped the job's in-place restarts at
// its cap (Target.InPlaceStopped), or the pod's strategy no longer lists
// recover-in-place.
func RestartRules(t *Target) bool {
	c := t.TrainingContainer()
	if c == nil {
		return false
	}
	if !contract.HasStrategy(contract.RecoverStrategyOf(t.Meta.Annotations, t.Policy.RecoverStrategy), contract.StrategyRecoverInPlace) {
		if removeInPlace(t, c) {
			t.Warnf("the recover-strategy has no %s: the in-place restarts trainguard gave the template are removed", contract.StrategyRecoverInPlace)
		}
		return false
	}
	if t.InPlaceStopped {
		// The job's in-place restarts reached its cap: its restart policy
		// decides from here. Only the record (trainguard's) says so; a
		// tenant can only make this stricter (a recover-strategy without
		// recover-in-place), never lift it.
		removeInPlace(t, c)
		t.Warnf("the job's in-place restarts reached its cap (trainguard.io/max-reschedules): no restart rules, the pod's restartPolicy decides")
		return false
	}
	ensureEnv(c, corev1.EnvVar{Name: EnvTorchrunMaxRestarts, Value: strconv.Itoa(t.Policy.MaxReschedules)})
	ensureEnv(c, corev1.EnvVar{Name: EnvTorchrunMonitorInterval, Value: torchrunMonitorInterval})
	policy, known := t.podRestartPolicy()
	if !known {
		return true // each pod adds the rules its restartPolicy needs
	}
	want := contract.InPlaceRestartRules()
	// fromTemplate: a pod whose job's template trainguard gave the rules
	// (the template's marker came with it).
	fromTemplate := !t.isTemplate() && marked(t, contract.InjectionRestartRules)
	switch {
	case equality.Semantic.DeepEqual(c.RestartPolicyRules, want):
		// Trainguard's rules, from the template: the container's policy is
		// the one the template expected the pod to have. Should the pod's
		// differ (the job's replica restartPolicy changed since), the
		// container follows the pod's for every other exit.
		if c.RestartPolicy != nil && string(*c.RestartPolicy) != string(policy) && fromTemplate {
			p := corev1.ContainerRestartPolicy(policy)
			c.RestartPolicy = &p
		}
	case c.RestartPolicyRules == nil && c.RestartPolicy != nil && string(*c.RestartPolicy) == string(policy) &&
		fromTemplate && !restartsEveryProcessFault(t.Spec, c.Name, policy):
		// The template's policy without its rules: an operator built
		// against a Kubernetes API before 1.34 (no restartPolicyRules
		// field; kubeflow's releases are) copied the container's
		// restartPolicy and dropped the rules. The policy is the pod's
		// own, so the rules change nothing but the process faults the
		// recover-strategy asks to restart in place.
		c.RestartPolicyRules = want
	case len(c.RestartPolicyRules) > 0 || c.RestartPolicy != nil:
		t.Warnf("container %q sets its own restartPolicy or restartPolicyRules; in-place restart rules not injected (they are kept as written)", c.Name)
	case !restartsEveryProcessFault(t.Spec, c.Name, policy):
		// Only where the pod's policy would not restart every process
		// fault already (OnFailure and Always do).
		p := corev1.ContainerRestartPolicy(policy)
		c.RestartPolicy = &p
		c.RestartPolicyRules = want
	}
	return true
}

// RestartRulesInTemplate is RestartRules for a job's template; a pod gets
// it per pod (Injections).
func RestartRulesInTemplate(t *Target) bool {
	if !t.isTemplate() {
		return false
	}
	return RestartRules(t)
}

// restartsEveryProcessFault says whether the named container of spec
// restarts after every process fault when its pod runs with policy.
func restartsEveryProcessFault(spec *corev1.PodSpec, container string, policy corev1.RestartPolicy) bool {
	pod := *spec
	pod.RestartPolicy = policy
	return !slices.ContainsFunc(contract.ProcessFaultExitCodes(), func(code int32) bool { return !contract.RestartsInPlace(&pod, container, code) })
}

// removeInPlace takes out what RestartRules put into c where the marker
// says trainguard put it there (a job's template): the restart rules, with
// the container's restartPolicy they need, when they are exactly
// trainguard's, and torchrun's env where it holds trainguard's values.
// What differs is the user's and stays; what is the same cannot be told
// from trainguard's and goes, as the cap means. It reports whether
// anything was removed.
func removeInPlace(t *Target, c *corev1.Container) bool {
	if !marked(t, contract.InjectionRestartRules) {
		return false
	}
	removed := false
	if equality.Semantic.DeepEqual(c.RestartPolicyRules, contract.InPlaceRestartRules()) {
		c.RestartPolicy, c.RestartPolicyRules, removed = nil, nil, true
	}
	ours := map[string]string{EnvTorchrunMaxRestarts: strconv.Itoa(t.Policy.MaxReschedules), EnvTorchrunMonitorInterval: torchrunMonitorInterval}
	before := len(c.Env)
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
		v, ok := ours[e.Name]
		return ok && e.ValueFrom == nil && e.Value == v
	})
	removed = removed || len(c.Env) != before
	if len(c.Env) == 0 {
		c.Env = nil
	}
	Unmark(t.Meta, contract.InjectionRestartRules)
	return removed
}

// marked says the marker lists the injection.
func marked(t *Target, name string) bool { return slices.Contains(Marked(t.Meta.Annotations), name) }
