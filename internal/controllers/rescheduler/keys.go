package rescheduler

// The keys the rescheduler reads and writes (contract.LabelBadNodes,
// contract.AnnotationDecision, contract.AnnotationReschedulesExhausted)
// are contract's, with every other trainguard.io/ key; the operators'
// pod labels are their kinds' (internal/foundations/apis, asked through internal/jobs).

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
	ReasonNotRetried           = "NotRetried" // recover-strategy=exit
	ReasonRescheduleCapReached = "RescheduleCapReached"
	// ReasonInPlaceRestartCapReached: the job's in-place restarts reached
	// its cap; trainguard restarts it in place no more (Warning, on the pod
	// and the job).
	ReasonInPlaceRestartCapReached = "InPlaceRestartCapReached"
	ReasonBackoffPending           = "BackoffPending"
	ReasonBarePodRecreated         = "BarePodRecreated"
	ReasonRecreateFailed           = "BarePodRecreateFailed"
	// ReasonNotRecreatable: a bare pod the chart's admission policy would
	// not let trainguard recreate (no marker, or anything Pod Security's
	// baseline refuses: host namespaces, a privileged container, added
	// capabilities, a hostPath volume, ...) is left alone rather than
	// evicted and lost.
	ReasonNotRecreatable = "BarePodNotRecreatable"

	// Held: the decision stands, its action waits.
	ReasonPartitionSuspected = "PartitionSuspected" // a zone or the cluster brake: one Event per brake (noteHeld)
	ReasonNodeRateLimited    = "NodeRateLimited"    // token bucket on lost nodes (--node-eviction-rate)
	// ReasonNamespaceRateLimited: the namespace's bucket on pods retried
	// for their exit (--retry-eviction-rate).
	ReasonNamespaceRateLimited = "NamespaceRateLimited"
	// ReasonLeaseViewStale: the cache showed the node's kubelet silent, the
	// API server has its Lease renewed (or cannot be read to confirm).
	ReasonLeaseViewStale  = "LeaseViewStale"
	ReasonEvictionBlocked = "EvictionBlocked" // a PodDisruptionBudget refused the eviction (429)

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
