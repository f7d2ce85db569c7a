package rescheduler

import "github.com/trainguard/trainguard/internal/contract"

// Keys the rescheduler reads and writes. They belong to the trainguard.io/
// contract; the lead may move them into policy/keys.go.
const (
	// LabelBadNodes marks the ConfigMaps holding bad-node records, in
	// trainguard's own namespace. The manager's cache watches only
	// ConfigMaps of that namespace with this label set to "true"; the label
	// on a ConfigMap anywhere else means nothing.
	LabelBadNodes = contract.Prefix + "bad-nodes"
	// AnnotationDecision on a pod remembers the last no-action decision
	// (PermanentFailure, RestartInPlace, ...), so the same Event is not emitted
	// again each time the pod is reconciled.
	AnnotationDecision = contract.Prefix + "rescheduler-decision"
	// AnnotationReschedulesExhausted is set on the job (or the bare pod) when
	// its reschedule cap is reached; the value is the number of reschedules.
	AnnotationReschedulesExhausted = contract.Prefix + "reschedules-exhausted"

	// Labels the training operators put on their pods.
	labelKubeflowJobName = "training.kubeflow.org/job-name"
	labelJobName         = "job-name"
	labelGroupName       = "group-name"
)

// Event reasons. They are stable: users alert on them. A "cause" reason says
// what the rescheduler detected; a "decision" reason says what it did.
const (
	// Causes.
	ReasonNodeLost         = "NodeLost"
	ReasonNodeDrained      = "NodeDrained"
	ReasonRetryableExit    = "RetryableExit"
	ReasonPermanentFailure = "PermanentFailure"

	// Decisions.
	ReasonGracefulDelete       = "GracefulDelete"
	ReasonForceDelete          = "ForceDelete"
	ReasonRestartInPlace       = "RestartInPlace"
	ReasonFaultSchedulingOff   = "FaultSchedulingOff"
	ReasonRescheduleCapReached = "RescheduleCapReached"
	ReasonBackoffPending       = "BackoffPending"
	ReasonBarePodRecreated     = "BarePodRecreated"
	ReasonRecreateFailed       = "BarePodRecreateFailed"

	// Held: the decision stands, its action waits.
	ReasonPartitionSuspected = "PartitionSuspected" // zone brake (--unhealthy-zone-threshold)
	ReasonNodeRateLimited    = "NodeRateLimited"    // token bucket (--node-eviction-rate)
	ReasonEvictionBlocked    = "EvictionBlocked"    // a PodDisruptionBudget refused the eviction (429)

	// ReasonRecordIgnored: a record or stash failed to parse or did not
	// match its job; it is never acted on.
	ReasonRecordIgnored = "RecordIgnored"

	// ReasonJobNotAccessible: trainguard may not read the pod's job (its
	// policy annotations) or mark it at the reschedule cap; the pod's own
	// annotations and the config apply, and the pod's Events say it all.
	ReasonJobNotAccessible = "JobNotAccessible"
)

// ControllerName names the controller, its Event reporter and its logger.
const ControllerName = "trainguard-rescheduler"
