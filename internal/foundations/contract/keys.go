// Package contract owns trainguard's vocabulary: every trainguard.io/ and
// MindCluster key, the one table that says how each annotation is parsed,
// applied to the effective Policy and validated, the injection names in the
// order they are applied, and the predicates every component asks (is the
// namespace enabled, did the object opt out, was it injected, which
// container is the training container). The webhook, `trainguard inject`,
// the validators and the rescheduler all call it, so they cannot disagree.
package contract

// Annotation and label keys. These are fixed contracts (the design card):
// tests and users outside the project depend on them.
const (
	// Prefix is shared by every trainguard annotation.
	Prefix = "trainguard.io/"

	// AnnotationInject opts a Namespace in ("enabled") or an object out ("disabled").
	AnnotationInject = Prefix + "inject"
	// AnnotationInjected is the marker listing the injections applied.
	AnnotationInjected = Prefix + "injected"

	AnnotationCheckpointClaim = Prefix + "checkpoint-claim"
	AnnotationCheckpointPath  = Prefix + "checkpoint-path"
	AnnotationRecoverStrategy = Prefix + "recover-strategy"
	AnnotationFaultScheduling = Prefix + "fault-scheduling"
	AnnotationGPULimit        = Prefix + "gpu-limit"
	AnnotationTaskD           = Prefix + "taskd"
	AnnotationPreStopTimeout  = Prefix + "prestop-timeout"
	// AnnotationCheckpointInterval sets the SDK's periodic checkpoint
	// interval (EnvCheckpointEvery); a job's own periodic() call wins.
	AnnotationCheckpointInterval = Prefix + "checkpoint-interval"
	AnnotationMaxReschedules     = Prefix + "max-reschedules"
	// AnnotationInProcessRecovery ("enabled") runs a PyTorchJob's trainer
	// under the SDK's supervisor (python3 -m trainguard supervise --): the
	// image must have the SDK, so it is never the default.
	AnnotationInProcessRecovery = Prefix + "in-process-recovery"

	// LabelManaged marks pods (and pod templates) trainguard injected, so the
	// rescheduler can watch only those.
	LabelManaged = Prefix + "managed"
	// LabelInjectEnabled mirrors a Namespace's opt-in annotation as a label,
	// because a webhook namespaceSelector can only see labels.
	LabelInjectEnabled = Prefix + "inject"

	// MindCluster's own vocabulary, set on jobs and pods when absent.
	AnnotationMindClusterRecoverStrategy = "recover-strategy"
	LabelMindClusterFaultScheduling      = "fault-scheduling"

	InjectEnabled  = "enabled"
	InjectDisabled = "disabled"

	// AnnotationAdmissionMode, on a Namespace, overrides the configuration's
	// admissionMode for the objects in it: ModeAudit admits them unchanged
	// and reports what trainguard would inject and refuse, ModeEnforce
	// injects and refuses (a namespace graduating from a cluster-wide audit).
	AnnotationAdmissionMode = Prefix + "admission-mode"
	ModeEnforce             = "enforce"
	ModeAudit               = "audit"
)

// Keys the rescheduler reads and writes.
const (
	// LabelBadNodes marks the ConfigMaps holding bad-node records. The manager's
	// cache watches only ConfigMaps with this label set to "true".
	LabelBadNodes = Prefix + "bad-nodes"
	// BadNodeRecordPrefix begins the name of every bad-node record (a
	// ConfigMap in trainguard's namespace, one per job). The chart's
	// ValidatingAdmissionPolicy lets trainguard's ServiceAccount write only
	// ConfigMaps with this name prefix and LabelBadNodes, so the
	// configuration ConfigMap beside them stays out of a stolen token's reach.
	BadNodeRecordPrefix = "bad-nodes-"
	// AnnotationDecision on a pod remembers the last no-action decision
	// (PermanentFailure, RestartInPlace, ...), so the same Event is not emitted
	// again each time the pod is reconciled.
	AnnotationDecision = Prefix + "rescheduler-decision"
	// AnnotationReschedulesExhausted is set on the job (or the bare pod) when
	// its reschedule cap is reached; the value is the number of reschedules.
	AnnotationReschedulesExhausted = Prefix + "reschedules-exhausted"

	// The labels the training operators put on their pods are their kinds'
	// (internal/foundations/apis), asked through the kinds' adapters (internal/jobs).
)

// LeaderElectionID names the leader-election Lease in trainguard's
// namespace. The chart's RBAC grants get and update on this name only, and
// its ValidatingAdmissionPolicy lets the ServiceAccount create no other Lease.
const LeaderElectionID = "trainguard.io"

// Names of the individual injections, as listed in AnnotationInjected and in
// the config file's `mutators` switch. What each does is the registry's
// (mutators.Injections, tied to InjectionNames by a test).
const (
	InjectionPreStop         = "prestop"
	InjectionTaskD           = "taskd"
	InjectionCheckpoint      = "checkpoint-volume"
	InjectionRecoverStrategy = "recover-strategy"
	InjectionGPU             = "gpu"
	InjectionAvoidNodes      = "avoid-nodes"
	InjectionRestartRules    = "restart-rules"
	InjectionInProcess       = "in-process-recovery"
)

// InjectionNames are all the injections' names, in the order they run and
// are listed in the marker. They live here, not in the registry, so the
// configuration can check its `mutators` switch without depending on the
// injection code.
func InjectionNames() []string {
	return []string{InjectionPreStop, InjectionTaskD, InjectionCheckpoint, InjectionRecoverStrategy, InjectionGPU, InjectionRestartRules, InjectionInProcess, InjectionAvoidNodes}
}

// Names trainguard gives to what it adds to a pod. Fixed so the agent, the
// SDK and the tests agree.
const (
	AgentVolumeName        = "trainguard-agent"
	AgentInitContainerName = "trainguard-agent-install"
	AgentBinaryName        = "trainguard-agent"
	CheckpointVolumeName   = "trainguard-checkpoint"
	TaskDPortName          = "taskd-port"
)
