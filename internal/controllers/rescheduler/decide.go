package rescheduler

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Action is what the controller does to the pod.
type Action string

const (
	// ActionNone leaves the pod alone (an Event may still say why).
	ActionNone Action = "None"
	// ActionWait looks again after Decision.RequeueAfter.
	ActionWait Action = "Wait"
	// ActionEvict evicts the pod through the Eviction API with its own grace
	// period, so the preStop checkpoint runs and PodDisruptionBudgets hold.
	ActionEvict Action = "Evict"
	// ActionEvictNow evicts the pod with grace period 0 (fault-scheduling=force
	// on a node that is still reachable): PodDisruptionBudgets still hold.
	ActionEvictNow Action = "EvictNow"
	// ActionForceDelete deletes the pod with grace period 0, bypassing its
	// PodDisruptionBudget. Decide chooses it only when the node object is
	// gone or the node has been unreachable for Options.ForceDeleteAfter.
	ActionForceDelete Action = "ForceDelete"
)

// Input is everything Decide looks at. The controller fills it from its
// cache; tests fill it by hand.
type Input struct {
	Pod *corev1.Pod
	// Node is the pod's node; nil means it was deleted.
	Node *corev1.Node
	Now  time.Time
	// KubeletSilentFor is how long the node's Lease has not been renewed, as
	// the controller observed it; meaningful only when LeaseKnown.
	KubeletSilentFor time.Duration
	LeaseKnown       bool
	// DefaultFaultScheduling and DefaultRecoverStrategy apply when the pod
	// carries no (valid) MindCluster label or annotation: the policy resolved
	// from the config file and trainguard.io/ annotations.
	DefaultFaultScheduling string
	DefaultRecoverStrategy string
	// TrainingContainers names the training container, in order of preference.
	TrainingContainers []string
	// MaxReschedules is the job's cap (trainguard.io/max-reschedules or the config).
	MaxReschedules int
	History        History
}

// History is the job's reschedule record, as far as Decide needs it.
type History struct {
	// Reschedules is the number of rounds so far.
	Reschedules int
	// RoundStart is when the latest round started.
	RoundStart time.Time
	// NodeRecorded says the pod's node is already recorded (unexpired) for the
	// job: the pod belongs to an incident already counted.
	NodeRecorded bool
	// InPlaceRestarts is the job's in-place restarts so far (the record's).
	InPlaceRestarts int
	// InPlaceStopped says the job's in-place restarts already reached its cap.
	InPlaceStopped bool
}

// Decision is what to do with one pod, and why.
type Decision struct {
	Action Action
	// Cause is what was detected (NodeLost, NodeDrained, RetryableExit,
	// PermanentFailure); empty when nothing is wrong yet.
	Cause string
	// Reason is the Event reason of the decision; empty when there is nothing
	// to report (healthy pod, node within its grace, terminating normally).
	Reason string
	// Message explains the cause and the decision for the Event and the log.
	Message string
	// ExitCode of the training container, when one was read.
	ExitCode *int32
	// Migrate records the node as bad for the job before the delete (and, for
	// a bare pod, recreates it elsewhere).
	Migrate bool
	// NewRound counts this reschedule against the job's cap.
	NewRound bool
	// InPlaceRestarts is the job's in-place restart count to record (the
	// highest seen); 0 records nothing.
	InPlaceRestarts int
	// StopInPlace ends the job's in-place restarts: the record says so
	// before anything else is done, so the job's pods created from then on
	// get no restart rules.
	StopInPlace bool
	// RequeueAfter is set with ActionWait.
	RequeueAfter time.Duration
	// Once is what the pod's decision annotation holds once a no-action
	// decision was reported (Reason when empty): an in-place restart is
	// reported once per restart, other decisions once per pod.
	Once string

	// container and restarts are the training container whose exit was
	// read and its restart count (detect).
	container string
	restarts  int32
	// inPlaceCap is the cap the in-place restarts were held against.
	inPlaceCap int
}

// once is the decision annotation's value for d (Once, else Reason).
func (d Decision) once() string {
	if d.Once != "" {
		return d.Once
	}
	return d.Reason
}

// Decide is the rescheduler's decision table. It is pure: the same input
// always gives the same decision, and it never touches the API server.
func Decide(in Input, opts Options) Decision {
	pod := in.Pod
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded {
		return Decision{Action: ActionNone}
	}
	mode, note := faultScheduling(pod, in.DefaultFaultScheduling)
	if pod.DeletionTimestamp != nil {
		return decideTerminating(in, mode, opts)
	}
	d := detect(in, opts)
	if d.Cause == "" || d.Cause == ReasonPermanentFailure {
		return d
	}
	d.Message += note
	if mode == contract.FaultSchedulingOff {
		return d.no(ReasonFaultSchedulingOff, "fault-scheduling=off: hands off")
	}
	strategy := contract.RecoverStrategyOf(pod.Annotations, orDefault(in.DefaultRecoverStrategy, configv1alpha1.DefaultRecoverStrategy))
	if contract.NoRetry(strategy) {
		return d.no(ReasonNotRetried, "recover-strategy=exit: not retried")
	}
	if restartsInPlace(in, d, opts) && contract.HasStrategy(strategy, contract.StrategyRecoverInPlace) {
		return restartInPlace(d, in)
	}
	if in.History.InPlaceStopped && processFault(d) && classifyNode(in, opts).health != nodeLost {
		// The job's in-place restarts are over (its pods created since have
		// no restart rules): migrating would record a healthy node as bad
		// and retry without end. The operator's own restart policy decides.
		return d.no(ReasonInPlaceRestartCapReached, fmt.Sprintf("the job's in-place restarts reached its cap (%d/%d): a process fault on a healthy node is left to the operator's restart policy (not migrated, no bad node recorded)",
			in.History.InPlaceRestarts, in.MaxReschedules))
	}
	if inPlaceOnly(strategy) {
		return d.no(ReasonRestartInPlace, "recover-in-place: not migrated; the kubelet restarts the container (needs restartPolicy OnFailure or Always, or a container restart rule for the exit code)")
	}
	d.Migrate = true
	d, stop := gate(d, in, opts)
	if stop {
		return d
	}
	if mode == contract.FaultSchedulingForce {
		d.Reason = ReasonForceDelete
		if ok, why := forceAllowed(in, opts); ok {
			d.Action = ActionForceDelete
			d.Message += "; fault-scheduling=force: " + why + ", force-deleting (grace period 0, PodDisruptionBudget bypassed)"
			return d
		}
		d.Action = ActionEvictNow
		d.Message += "; fault-scheduling=force: evicting with grace period 0 (PodDisruptionBudgets hold)"
		return d
	}
	d.Action, d.Reason = ActionEvict, ReasonGracefulDelete
	d.Message += "; fault-scheduling=grace: evicting gracefully so the preStop checkpoint runs (PodDisruptionBudgets hold)"
	return d
}

// forceAllowed says whether a pod on in.Node may be force-deleted: the node
// object is gone, or the node has been unreachable for at least
// opts.ForceDeleteAfter.Duration. why says which, for the Event.
func forceAllowed(in Input, opts Options) (bool, string) {
	name := in.Pod.Spec.NodeName
	if in.Node == nil {
		return true, fmt.Sprintf("node %s was deleted", name)
	}
	down, how := unreachable(in, opts)
	if how == "" || down < opts.ForceDeleteAfter.Duration {
		return false, ""
	}
	return true, fmt.Sprintf("node %s unreachable (%s) for %s, past --force-delete-after=%s", name, how, down.Round(time.Second), opts.ForceDeleteAfter.Duration)
}

// unreachable is how long in.Node has been unreachable, and how: its
// kubelet silent past --lease-lost-after (counted from the last renewal
// seen), or Ready not True (from the condition's transition); the longer of
// the two. how is "" when the node is reachable.
func unreachable(in Input, opts Options) (time.Duration, string) {
	var down time.Duration
	how := ""
	status, since := readyCondition(in.Node)
	if status != corev1.ConditionTrue {
		down, how = in.Now.Sub(since), "Ready="+string(status)
	}
	if kubeletSilent(in, opts.LeaseLostAfter.Duration) && silence(in) > down {
		down, how = silence(in), "kubelet silent, Lease not renewed"
	}
	return down, how
}

// kubeletSilent says whether the node's kubelet has said nothing for at
// least d.
func kubeletSilent(in Input, d time.Duration) bool {
	return in.LeaseKnown && silence(in) >= d
}

// silence is how long the node's kubelet has said nothing: since the last
// renewal of its Lease seen, or since its Ready condition turned True when
// that is later. A kubelet back from the dead posts Ready before its first
// renewal reaches trainguard's cache; the node's new pods (scheduled there
// because it is Ready) were deleted on the old silence, and the job
// recorded a strike against a node that was up. The node lifecycle
// controller, too, takes the newer of the two heartbeats. Only the
// kubelet writes Ready=True; a partitioned one cannot.
func silence(in Input) time.Duration {
	d := in.KubeletSilentFor
	if in.Node == nil {
		return d
	}
	if status, since := readyCondition(in.Node); status == corev1.ConditionTrue && in.Now.Sub(since) < d {
		d = max(in.Now.Sub(since), 0)
	}
	return d
}

// readyCondition is the node's Ready status and when it last changed;
// Unknown since the node's creation when it has none.
func readyCondition(node *corev1.Node) (corev1.ConditionStatus, time.Time) {
	status, since := corev1.ConditionUnknown, node.CreationTimestamp.Time
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			status, since = c.Status, c.LastTransitionTime.Time
		}
	}
	return status, since
}

// detect finds what is wrong with a pod that is not being deleted.
func detect(in Input, opts Options) Decision {
	pod := in.Pod
	term := classifyTermination(pod, in.TrainingContainers, opts.UnknownExitCodeRetryable)
	switch term.class {
	case exitPermanent:
		return Decision{Action: ActionNone, Cause: ReasonPermanentFailure, Reason: ReasonPermanentFailure, ExitCode: term.exitCode,
			Message: term.why + ": permanent failure, not retried"}
	case exitRetryable:
		return Decision{Cause: ReasonRetryableExit, ExitCode: term.exitCode, Message: term.why + " is retryable",
			container: term.container, restarts: term.restarts}
	case exitSuccess:
		return Decision{Action: ActionNone, ExitCode: term.exitCode}
	}
	node := classifyNode(in, opts)
	switch {
	case hasCondition(pod, corev1.DisruptionTarget):
		// Someone is already evicting or deleting the pod (a drain, the
		// taint manager, preemption): the kubelet runs its preStop hook;
		// trainguard adds nothing.
		return Decision{Action: ActionNone}
	case node.health == nodeLost:
		return Decision{Cause: ReasonNodeLost, Message: node.why}
	case node.health == nodeNotReady:
		// Not yet lost: look again when the grace is over.
		return Decision{Action: ActionWait, RequeueAfter: node.wait, Message: node.why}
	}
	return Decision{Action: ActionNone}
}

// decideTerminating escalates a delete that hangs on an unreachable node:
// the kubelet will never confirm it, and the replacement (same name, for
// kubeflow) cannot start until the pod object is gone.
func decideTerminating(in Input, mode string, opts Options) Decision {
	pod := in.Pod
	node := classifyNode(in, opts)
	alreadyForced := pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
	if node.health != nodeLost || mode == contract.FaultSchedulingOff || alreadyForced {
		return Decision{Action: ActionNone}
	}
	d := Decision{Cause: ReasonNodeLost, Reason: ReasonForceDelete, Action: ActionForceDelete}
	ok, why := forceAllowed(in, opts)
	if !ok {
		// Lost, but not yet long enough to bypass the budget: look again
		// when it is.
		return Decision{Action: ActionWait, RequeueAfter: forceWait(in, opts), Message: node.why + "; graceful delete pending"}
	}
	if mode == contract.FaultSchedulingForce {
		d.Message = why + "; fault-scheduling=force: pod is terminating, force-deleting"
		return d
	}
	if kubeletSilent(in, opts.ForceDeleteAfter.Duration) {
		// A kubelet that has not been heard from cannot be carrying out the
		// graceful delete: waiting --grace-over-time for it gains nothing.
		d.Message = why + "; the kubelet cannot carry out the graceful delete: force-deleting"
		return d
	}
	requested := pod.DeletionTimestamp.Time
	if pod.DeletionGracePeriodSeconds != nil {
		requested = requested.Add(-time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)
	}
	deadline := requested.Add(opts.GraceOverTime.Duration)
	if in.Now.Before(deadline) {
		return Decision{Action: ActionWait, RequeueAfter: deadline.Sub(in.Now), Message: node.why + "; graceful delete pending"}
	}
	d.Message = fmt.Sprintf("%s; graceful delete requested %s ago (grace-over-time %s): force-deleting", why, in.Now.Sub(requested).Round(time.Second), opts.GraceOverTime.Duration)
	return d
}

// forceWait is how long until forceAllowed turns true for a node that is
// unreachable but not for long enough yet.
func forceWait(in Input, opts Options) time.Duration {
	down, _ := unreachable(in, opts)
	if d := opts.ForceDeleteAfter.Duration - down; d > time.Second {
		return d
	}
	return time.Second
}

// gate applies the job's cap and backoff. stop is true when the returned
// decision is final (cap reached, backoff pending).
func gate(d Decision, in Input, opts Options) (Decision, bool) {
	h := in.History
	switch {
	case h.NodeRecorded:
		d.Message += fmt.Sprintf("; node already recorded for this job (reschedule %d/%d)", h.Reschedules, in.MaxReschedules)
	case h.Reschedules >= in.MaxReschedules:
		return d.no(ReasonRescheduleCapReached, fmt.Sprintf("reschedule cap reached (%d/%d): no further action", h.Reschedules, in.MaxReschedules)), true
	case h.Reschedules > 0 && in.Now.Before(h.RoundStart.Add(opts.BackoffBase.Duration)):
		d.Message += fmt.Sprintf("; joins reschedule %d/%d started %s ago", h.Reschedules, in.MaxReschedules, in.Now.Sub(h.RoundStart).Round(time.Second))
	case h.Reschedules > 0 && in.Now.Before(h.RoundStart.Add(backoff(opts, h.Reschedules))):
		next := h.RoundStart.Add(backoff(opts, h.Reschedules))
		d.Action, d.Reason, d.Migrate, d.RequeueAfter = ActionWait, ReasonBackoffPending, false, next.Sub(in.Now)
		d.Message += fmt.Sprintf("; backing off: reschedule %d/%d allowed in %s", h.Reschedules+1, in.MaxReschedules, d.RequeueAfter.Round(time.Second))
		return d, true
	default:
		d.NewRound = true
		d.Message += fmt.Sprintf("; reschedule %d/%d", h.Reschedules+1, in.MaxReschedules)
	}
	return d, false
}

// no turns d into a no-action decision with an Event reason.
func (d Decision) no(reason, why string) Decision {
	d.Action, d.Reason, d.Migrate, d.NewRound = ActionNone, reason, false, false
	d.Message += "; " + why
	return d
}

// faultScheduling reads MindCluster's label. An invalid value falls back to
// the default, and the note says so (the validating webhook refuses it, but
// pods may predate it).
func faultScheduling(pod *corev1.Pod, def string) (mode, note string) {
	if def == "" {
		def = configv1alpha1.DefaultFaultScheduling
	}
	v, ok := pod.Labels[contract.LabelMindClusterFaultScheduling]
	if !ok {
		return def, ""
	}
	if _, err := contract.ParseFaultScheduling(v); err != nil {
		return def, fmt.Sprintf(" (label %s=%q ignored: %v; using %s)", contract.LabelMindClusterFaultScheduling, v, err, def)
	}
	return v, ""
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// restartsInPlace says whether d is a container's retryable exit that the
// kubelet restarts where it is: the pod has not failed, its node is not
// lost, and the container's restart rules (the pod mutator's, for
// contract.ProcessFaultExitCodes) or restartPolicy restart that code.
func restartsInPlace(in Input, d Decision, opts Options) bool {
	if d.Cause != ReasonRetryableExit || d.ExitCode == nil || d.container == "" || in.Pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if classifyNode(in, opts).health == nodeLost {
		return false
	}
	return contract.RestartsInPlace(&in.Pod.Spec, d.container, *d.ExitCode)
}

// restartInPlace: a process fault on a healthy node. The kubelet restarts
// the container (its crash-loop back-off spaces repeats: at once, then 10 s
// doubling to 5 min); trainguard neither evicts nor records the node, and
// counts the job's in-place restarts against its cap: the highest restart
// count seen on any of its pods, kept in the record (the job's ranks
// restart together, so peers of one incident are counted once, and a pod
// that replaces another continues the count).
func restartInPlace(d Decision, in Input) Decision {
	n := max(int(d.restarts), in.History.InPlaceRestarts)
	d.InPlaceRestarts = n
	if n >= in.MaxReschedules || in.History.InPlaceStopped {
		return inPlaceCapReached(d, in, n)
	}
	d = d.no(ReasonRestartInPlace, fmt.Sprintf("process fault on a healthy node: the kubelet restarts the container in place (the job's in-place restart %d/%d); not migrated, no bad node recorded", n+1, in.MaxReschedules))
	// Reported once per restart of this pod.
	d.Once = fmt.Sprintf("%s/%d", ReasonRestartInPlace, d.restarts+1)
	return d
}

// inPlaceCapReached stops the job's in-place restarts: the record says so
// (StopInPlace), so the pod webhook gives the job's new pods no restart
// rules. A pod that restarts in place only by trainguard's restart rules
// (its restartPolicy would not: kubeflow's ExitCode, Never) is evicted
// once, and its operator's policy decides from there: its replacement,
// without the rules, fails as the operator expects. A pod its own
// restartPolicy restarts (OnFailure, Always; the operator counts those
// restarts, kubeflow against backoffLimit), a pod with rules of its own
// and a bare pod (nobody would create it again) are left alone.
func inPlaceCapReached(d Decision, in Input, n int) Decision {
	d = d.no(ReasonInPlaceRestartCapReached, fmt.Sprintf("the job's in-place restarts reached its cap (%d/%d): trainguard restarts it in place no more, and the job's pods created from now on get no restart rules", n, in.MaxReschedules))
	d.StopInPlace, d.inPlaceCap = true, in.MaxReschedules
	if onlyTrainguardRules(in.Pod, d.container, *d.ExitCode) {
		d.Action = ActionEvict
		d.Message += "; the pod restarts in place only by trainguard's restart rules: evicted once, so that the operator's restart policy decides from here"
		return d
	}
	d.Message += "; the pod's own restart policy restarts it: the operator's policy (e.g. kubeflow's backoffLimit) decides"
	return d
}

// onlyTrainguardRules says whether the pod's container restarts after code
// only because of the restart rules the pod mutator injects (exactly
// contract.InPlaceRestartRules): without them its restartPolicy would let
// it stop. A bare pod never qualifies: evicting it would lose it.
func onlyTrainguardRules(pod *corev1.Pod, container string, code int32) bool {
	if metav1.GetControllerOf(pod) == nil {
		return false
	}
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == container })
	if i < 0 || !equality.Semantic.DeepEqual(pod.Spec.Containers[i].RestartPolicyRules, contract.InPlaceRestartRules()) {
		return false
	}
	without := pod.Spec.DeepCopy()
	without.Containers[i].RestartPolicyRules = nil
	without.Containers[i].RestartPolicy = nil
	return !contract.RestartsInPlace(without, container, code)
}

// processFault says whether d is a retryable exit of a process fault
// (contract.ProcessFaultExitCodes).
func processFault(d Decision) bool {
	return d.Cause == ReasonRetryableExit && d.ExitCode != nil && contract.IsProcessFault(*d.ExitCode)
}

// inPlaceOnly says whether a fault the kubelet does not restart by itself
// (a node fault, or a pod its restartPolicy does not restart) is left
// where it is: the strategy lists recover-in-place without recover. With
// both, such faults migrate.
func inPlaceOnly(strategy string) bool {
	return contract.HasStrategy(strategy, contract.StrategyRecoverInPlace) && !contract.HasStrategy(strategy, contract.StrategyRecover)
}
