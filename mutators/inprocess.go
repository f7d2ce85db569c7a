package mutators

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// The SDK's in-process recovery (docs/checkpoint-protocol.md, "In-process
// recovery"): its supervisor, the env it reads, and the bound on a
// survivor's wait.
const (
	EnvReformTimeout     = "TRAINGUARD_REFORM_TIMEOUT"
	EnvInProcessRestarts = "TRAINGUARD_INPROCESS_RESTARTS"
	// defaultReformTimeout is the SDK's own default; a pod whose grace
	// period is shorter gets less (reformTimeout).
	defaultReformTimeout = 30 * time.Second
)

// SupervisorCommand is what the training container's command is prefixed
// with: the image's python3 runs the SDK's supervisor, which runs the
// user's command (and args) as its child.
func SupervisorCommand() []string {
	return []string{"python3", "-m", "trainguard", "supervise", "--"}
}

// Supervised says c's command already starts with SupervisorCommand.
func Supervised(c *corev1.Container) bool {
	prefix := SupervisorCommand()
	return len(c.Command) >= len(prefix) && slices.Equal(c.Command[:len(prefix)], prefix)
}

// InProcess runs the training container's command, or under torchrun
// each worker torchrun starts (PYTHON_EXEC=trainguard-python), under the
// SDK's supervisor where the effective policy asks for it
// (trainguard.io/in-process-recovery: enabled): a trainer a signal killed
// or an uncaught exception ended (exit 1), or one that left a group that
// went on without it (exit 75, the SDK's rejoin), is started again in its
// container at once, and the surviving ranks
// re-form the group in their own processes. Its budget of restarts is the
// job's in-place cap (trainguard.io/max-reschedules), 0 once the
// rescheduler stopped the job's in-place restarts: each one counts toward
// that cap (the supervisor reports them in the termination message,
// contract.InProcessRestartsLine). A container without a command (the
// image's entrypoint, unknown here) is refused by the validating webhook
// and left alone here. Idempotent: a command that starts with the
// supervisor is not wrapped again.
func InProcess(t *Target) bool {
	c := t.TrainingContainer()
	if c == nil || !t.Policy.InProcessRecovery {
		return false
	}
	switch way, why := contract.InProcessApplies(t.Kind.Kind, t.Torchrun, c); way {
	case contract.InProcessNot:
		t.Warnf("%s=enabled: not applied: %s", contract.AnnotationInProcessRecovery, why)
		return false
	case contract.InProcessTorchrun:
		ensureEnv(c, corev1.EnvVar{Name: contract.EnvPythonExec, Value: contract.EnvPythonExecValue})
	default:
		if len(c.Command) == 0 {
			return false // refused at validation (validators.checkInProcess)
		}
		if !Supervised(c) {
			c.Command = slices.Concat(SupervisorCommand(), c.Command)
		}
	}
	ensureEnv(c, corev1.EnvVar{Name: EnvReformTimeout, Value: contract.FormatDuration(reformTimeout(t))})
	budget := t.Policy.MaxReschedules
	if t.InPlaceStopped {
		budget = 0
	}
	setBudget(c, budget)
	return true
}

// InProcessPod completes InProcess for a pod: the rescheduler's record
// (which only each pod is admitted with) may have stopped the job's
// in-place restarts since its template was injected.
func InProcessPod(t *Target) bool {
	c := t.TrainingContainer()
	if c == nil || !(Supervised(c) || contract.WorkersSupervised(c)) || !marked(t, contract.InjectionInProcess) {
		return false
	}
	if t.InPlaceStopped {
		setBudget(c, 0)
	}
	return true
}

// setBudget sets the supervisor's restarts to at most n: a smaller value
// of the user's stays (a tighter bound), a larger one or garbage does not.
// One entry stays, where the first was: the kubelet takes the last of
// entries with one name, so a second one after a first within the bound
// would lift it.
func setBudget(c *corev1.Container, n int) {
	budget, at := n, -1
	env := c.Env[:0]
	for _, e := range c.Env {
		if e.Name != EnvInProcessRestarts {
			env = append(env, e)
			continue
		}
		budget = n
		if have, err := strconv.Atoi(strings.TrimSpace(e.Value)); err == nil && have >= 0 && have <= n && e.ValueFrom == nil {
			budget = have
		}
		if at < 0 {
			at = len(env)
			env = append(env, e)
		}
	}
	v := corev1.EnvVar{Name: EnvInProcessRestarts, Value: strconv.Itoa(budget)}
	if at < 0 {
		env = append(env, v)
	} else {
		env[at] = v
	}
	c.Env = env
}

// reformTimeout is how long a survivor waits for the group to re-form:
// the SDK's default, and below half the pod's grace period, so a survivor
// of a pod being stopped still leaves through the termination path.
func reformTimeout(t *Target) time.Duration {
	grace := int64(kubeletDefaultGracePeriod)
	if t.Spec.TerminationGracePeriodSeconds != nil {
		grace = *t.Spec.TerminationGracePeriodSeconds
	}
	half := time.Duration(math.Max(1, float64(grace/2))) * time.Second
	return min(defaultReformTimeout, half)
}
