package rescheduler

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// exitClass is what a terminated pod's failure means for a retry.
type exitClass int

const (
	exitNone      exitClass = iota // nothing terminated (yet)
	exitSuccess                    // exit 0
	exitPermanent                  // do not retry: the same code would fail again
	exitRetryable                  // retry elsewhere: the failure came from outside the program
)

// exitCodeClass classifies an exit code by kubeflow's ExitCode restart
// policy, which trainguard follows so a job behaves the same under both.
// ok is false for codes the policy does not define.
func exitCodeClass(code int32) (class exitClass, why string, ok bool) {
	switch code {
	case 1:
		return exitPermanent, "general error", true
	case 2:
		return exitPermanent, "misuse of shell builtins", true
	case 126:
		return exitPermanent, "command cannot execute", true
	case 127:
		return exitPermanent, "command not found", true
	case 128:
		return exitPermanent, "invalid argument to exit", true
	case 130:
		return exitRetryable, "SIGINT", true
	case 137:
		return exitRetryable, "SIGKILL", true
	case 138:
		return exitRetryable, "SIGUSR1 (user-retryable; the SDK's exit when a peer died)", true
	case 139:
		// kubeflow retries every code >= 128; a crashed process restarts
		// in place, bounded by the job's cap.
		return exitRetryable, "SIGSEGV (the process crashed)", true
	case 143:
		return exitRetryable, "SIGTERM", true
	}
	return 0, "", false
}

// podReasonTable classifies pod-level reasons (pod.status.reason) set by the
// kubelet or the control plane. Those caused by the node or the cluster are
// retryable elsewhere; DeadlineExceeded is the user's own
// activeDeadlineSeconds and would hit again.
func podReasonTable(reason string) (exitClass, bool) {
	switch reason {
	case "Evicted", // node pressure
		"Preempting",
		"NodeLost",
		"NodeShutdown",
		"Shutdown",
		"Terminated",               // graceful node shutdown
		"UnexpectedAdmissionError", // e.g. a GPU vanished from the device plugin
		"NodeAffinity":             // node labels changed under the pod
		return exitRetryable, true
	case "DeadlineExceeded":
		return exitPermanent, true
	}
	return 0, false
}

// termination is the classified end of a pod's training container.
type termination struct {
	class    exitClass
	exitCode *int32
	why      string
	// container is the container whose exit this is and restarts its
	// restart count, when the end is a container's exit.
	container string
	restarts  int32
}

// classifyTermination looks at a pod that has stopped (phase Failed) or whose
// training container is crash-looping. trainingNames picks the training
// container, as the pod mutator does.
func classifyTermination(pod *corev1.Pod, trainingNames []string, defaultRetryable bool) termination {
	if class, ok := podReasonClass(pod.Status.Reason); ok {
		return termination{class: class, why: fmt.Sprintf("pod reason %s: %s", pod.Status.Reason, pod.Status.Message)}
	}
	status := trainingTermination(pod, trainingNames)
	if status == nil {
		if pod.Status.Phase != corev1.PodFailed {
			return termination{class: exitNone}
		}
		if hasCondition(pod, corev1.DisruptionTarget) {
			return termination{class: exitRetryable, why: "pod failed after a disruption (DisruptionTarget condition)"}
		}
		// Failed without any container status: nothing tells us why.
		return undefined(nil, "pod failed without a container exit code", defaultRetryable)
	}
	term := terminatedState(status)
	t := classifyExit(term, defaultRetryable)
	// The trainer restarts the SDK's supervisor made inside that run of
	// the container are in-place restarts too: they count toward the cap.
	t.container, t.restarts = status.Name, status.RestartCount+int32(contract.InProcessRestarts(term.Message)) //nolint:gosec // at most 1000
	return t
}

// classifyExit classifies one terminated container state.
func classifyExit(term *corev1.ContainerStateTerminated, defaultRetryable bool) termination {
	code := term.ExitCode
	switch {
	case term.Reason == "OOMKilled":
		return termination{class: exitRetryable, exitCode: &code, why: "container OOMKilled"}
	case code == 0:
		return termination{class: exitSuccess, exitCode: &code, why: "exit code 0"}
	}
	if class, why, ok := exitCodeClass(code); ok {
		return termination{class: class, exitCode: &code, why: fmt.Sprintf("exit code %d: %s", code, why)}
	}
	return undefined(&code, fmt.Sprintf("exit code %d", code), defaultRetryable)
}

func undefined(code *int32, what string, retryable bool) termination {
	if retryable {
		return termination{class: exitRetryable, exitCode: code, why: what + " is undefined; retryable by default (--unknown-exit-code-retryable)"}
	}
	return termination{class: exitPermanent, exitCode: code, why: what + " is undefined; permanent by default (--unknown-exit-code-retryable=false)"}
}

func podReasonClass(reason string) (exitClass, bool) {
	if c, ok := podReasonTable(reason); ok {
		return c, true
	}
	// OutOfcpu, OutOfnvidia.com/gpu...: the node could not admit the pod.
	if strings.HasPrefix(reason, "OutOf") {
		return exitRetryable, true
	}
	return exitNone, false
}

// trainingTermination returns the status of the training container when it
// terminated: its current state, or its last state when the kubelet is
// backing off restarting it (terminatedState). A sidecar's failure counts
// only when the training container has not itself terminated.
func trainingTermination(pod *corev1.Pod, trainingNames []string) *corev1.ContainerStatus {
	statuses := pod.Status.ContainerStatuses
	for _, name := range trainingNames {
		for i := range statuses {
			if statuses[i].Name == name && terminatedState(&statuses[i]) != nil {
				return &statuses[i]
			}
		}
	}
	if len(pod.Spec.Containers) > 0 {
		first := pod.Spec.Containers[0].Name
		for i := range statuses {
			if statuses[i].Name == first && terminatedState(&statuses[i]) != nil {
				return &statuses[i]
			}
		}
	}
	for i := range statuses {
		if t := terminatedState(&statuses[i]); t != nil && t.ExitCode != 0 {
			return &statuses[i]
		}
	}
	return nil
}

func terminatedState(s *corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	if s.State.Terminated != nil {
		return s.State.Terminated
	}
	if s.State.Waiting != nil && s.State.Waiting.Reason == "CrashLoopBackOff" {
		return s.LastTerminationState.Terminated
	}
	return nil
}

func hasCondition(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// nodeHealth is the state of a pod's node as far as its pods are concerned.
type nodeHealth int

const (
	nodeHealthy  nodeHealth = iota
	nodeNotReady            // NotReady or Unknown, still within the grace
	nodeLost                // deleted, or NotReady/Unknown past the grace
)

type nodeState struct {
	health nodeHealth
	why    string
	// wait is, for nodeNotReady, how long until the node counts as lost.
	wait time.Duration
}

// classifyNode judges a node; nil means it no longer exists.
func classifyNode(in Input, opts Options) nodeState {
	name, node, now, grace := in.Pod.Spec.NodeName, in.Node, in.Now, opts.NodeLostGrace.Duration
	if node == nil {
		return nodeState{health: nodeLost, why: fmt.Sprintf("node %s was deleted", name)}
	}
	if kubeletSilent(in, opts.LeaseLostAfter.Duration) {
		// Ahead of the node lifecycle controller (which marks the node
		// Unknown only some time later): the kubelet missed every renewal
		// of its Lease for the whole lease duration.
		return nodeState{health: nodeLost, why: fmt.Sprintf("node %s: kubelet silent for %s, its Lease not renewed (--lease-lost-after %s)",
			name, silence(in).Round(time.Second), opts.LeaseLostAfter.Duration)}
	}
	status, since := readyCondition(node)
	if status != corev1.ConditionTrue {
		down := now.Sub(since)
		if down >= grace {
			return nodeState{health: nodeLost, why: fmt.Sprintf("node %s Ready=%s for %s (grace %s)", name, status, down.Round(time.Second), grace)}
		}
		return nodeState{health: nodeNotReady, wait: grace - down, why: fmt.Sprintf("node %s Ready=%s for %s", name, status, down.Round(time.Second))}
	}
	// A cordon (spec.unschedulable, the node.kubernetes.io/unschedulable
	// taint) is not a failure: the node runs its pods. A drain that follows
	// reaches them as evictions, which the kubelet carries out.
	return nodeState{health: nodeHealthy}
}
