package contract

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Exit codes of a training process that died on its own while its node
// stayed healthy (with ExitPeerLost, exitcodes.go). Each is >= 128, so
// kubeflow's ExitCode restart policy retries it too: restarting such a
// process in place changes where the retry happens (the same node, in
// seconds), never whether.
const (
	// ExitSIGKILL: killed, as the OOM killer does.
	ExitSIGKILL int32 = 137
	// ExitSIGSEGV: the process crashed (a segfault in a kernel, a driver).
	ExitSIGSEGV int32 = 139
)

// ProcessFaultExitCodes are the training container's exits that restart in
// place (recover-in-place): the kubelet restarts the container on its node.
func ProcessFaultExitCodes() []int32 { return []int32{ExitSIGKILL, ExitPeerLost, ExitSIGSEGV} }

// IsProcessFault reports whether a training container's exit code is one of
// ProcessFaultExitCodes.
func IsProcessFault(code int32) bool { return slices.Contains(ProcessFaultExitCodes(), code) }

// InPlaceRestartRules are the container restart rules (KEP-5307, beta and on
// by default since Kubernetes 1.35) the pod mutator gives the training
// container: the kubelet restarts it where it is after a process fault,
// whatever the pod's restartPolicy, so an operator that reads a failed pod
// (kubeflow's ExitCode, a Job's podFailurePolicy) never sees one.
func InPlaceRestartRules() []corev1.ContainerRestartRule {
	return []corev1.ContainerRestartRule{{
		Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{
			Operator: corev1.ContainerRestartRuleOnExitCodesOpIn,
			Values:   ProcessFaultExitCodes(),
		},
	}}
}

// RestartsInPlace reports whether the kubelet restarts the named container of
// spec after it exited with code: its restart rules first (the first
// matching rule decides), then its own restartPolicy, then the pod's.
func RestartsInPlace(spec *corev1.PodSpec, container string, code int32) bool {
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == container })
	if i < 0 {
		return false
	}
	c := &spec.Containers[i]
	for _, r := range c.RestartPolicyRules {
		if r.ExitCodes == nil {
			continue
		}
		listed := slices.Contains(r.ExitCodes.Values, code)
		if listed == (r.ExitCodes.Operator == corev1.ContainerRestartRuleOnExitCodesOpIn) {
			return r.Action == corev1.ContainerRestartRuleActionRestart || r.Action == corev1.ContainerRestartRuleActionRestartAllContainers
		}
	}
	policy := string(spec.RestartPolicy)
	if c.RestartPolicy != nil {
		policy = string(*c.RestartPolicy)
	}
	switch corev1.RestartPolicy(policy) {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true // Always, and the API's default when unset
}

// Recover strategies trainguard acts on (MindCluster's vocabulary).
const (
	StrategyRecover        = "recover"
	StrategyRecoverInPlace = "recover-in-place"
	StrategyExit           = "exit"
)

// RecoverStrategyOf is the effective recover-strategy of a pod or template
// with these annotations: MindCluster's annotation, else trainguard's, else
// def (the resolved policy). An invalid value is skipped (the validating
// webhook refuses it, but a pod may predate it).
func RecoverStrategyOf(annotations map[string]string, def string) string {
	for _, key := range []string{AnnotationMindClusterRecoverStrategy, AnnotationRecoverStrategy} {
		if v, ok := annotations[key]; ok {
			if _, err := ParseRecoverStrategy(v); err == nil {
				return v
			}
		}
	}
	return def
}

// NoRetry reports whether a recover-strategy asks for no retry at all:
// `exit` without any recover strategy.
func NoRetry(strategy string) bool {
	return HasStrategy(strategy, StrategyExit) && !HasStrategy(strategy, StrategyRecover) && !HasStrategy(strategy, StrategyRecoverInPlace)
}
