// Package v1alpha1 is trainguard's configuration file format,
// config.trainguard.io/v1alpha1 kind Configuration, in the way of jobset's
// and kueue's api/config/v1alpha1: the types (here), SetDefaults
// (defaults.go) and Validate (validation.go). The defaulted Configuration
// is the one settings type of the process: the webhook and the controllers
// read it, `trainguard serve` binds its flags onto it (internal/config).
//
// It lives under internal/ because the file is the public contract, not
// the Go type: no other module imports it, and the layering test keeps
// internal/config/... one layer.
//
// Pointers mark the fields whose zero value is a setting of its own (0
// means none, false turns a default-on switch off); every other field's
// zero value means "unset, take the default", and a zero written in the
// file is kept (the file is decoded over the defaults) so that the check
// refuses it with its path instead of silently defaulting it.
package v1alpha1

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Versioned file format, like kueue's and jobset's Configuration.
const (
	APIVersion = "config.trainguard.io/v1alpha1"
	Kind       = "Configuration"
)

// Configuration is the configuration file read by `trainguard serve --config`,
// `trainguard inject --config` and `trainguard validate --config`:
// apiVersion config.trainguard.io/v1alpha1, kind Configuration. Every
// field has a default, so an empty file (or none) is valid. The
// unversioned format of earlier releases (the same fields without
// apiVersion and kind) still loads, with a deprecation warning.
type Configuration struct {
	metav1.TypeMeta `json:",inline"`

	// ClusterWide injects every namespace except ExcludedNamespaces, without
	// waiting for the namespace's opt-in annotation.
	ClusterWide bool `json:"clusterWide,omitempty"`
	// ExcludedNamespaces are never mutated. kube-system and trainguard's own
	// namespace are always added, whatever this says, and every kube-*
	// namespace is excluded too (Excluded).
	ExcludedNamespaces []string `json:"excludedNamespaces,omitempty"`

	// AdmissionMode is enforce (inject and refuse) or audit (admit every
	// object unchanged and report, as admission warnings, Events and a
	// metric, what trainguard would inject and refuse); a namespace's
	// trainguard.io/admission-mode overrides it. Roll out in audit, enforce later.
	AdmissionMode string `json:"admissionMode,omitempty"`

	Checkpoint        CheckpointConfig        `json:"checkpoint"`
	TaskD             TaskDConfig             `json:"taskd"`
	RecoverStrategy   string                  `json:"recoverStrategy,omitempty"`
	FaultScheduling   string                  `json:"faultScheduling,omitempty"`
	GPU               GPUConfig               `json:"gpu"`
	Agent             AgentConfig             `json:"agent"`
	TrainingContainer TrainingContainerConfig `json:"trainingContainer"`
	// Mutators switches individual injections off by name (prestop, taskd,
	// checkpoint-volume, recover-strategy, gpu, avoid-nodes). Absent means on.
	Mutators map[string]bool `json:"mutators,omitempty"`
	// MaxReschedules caps the rescheduler per job; trainguard.io/max-reschedules overrides it.
	// A pointer, as every count here: unset takes the default, 0 means none.
	MaxReschedules *int `json:"maxReschedules,omitempty"`
	// Rescheduler configures the rescheduling controller.
	Rescheduler ReschedulerConfig `json:"rescheduler"`
	// PriorityBoost: Kueue priority boost from each job's work at risk
	// (docs/preemption.md).
	PriorityBoost PriorityBoostConfig `json:"priorityBoost"`
	// NodeWarnings: node conditions and taints that announce a node's loss,
	// on which every job with a rank there commits a checkpoint at once
	// (docs/node-warnings.md).
	NodeWarnings NodeWarningsConfig `json:"nodeWarnings"`
	// LeaderElection times the leader election among replicas (only the
	// leader runs the rescheduler; every replica serves the webhooks).
	LeaderElection LeaderElectionConfig `json:"leaderElection"`
}

// LeaderElectionConfig holds the leader-election Lease's timing, the
// three durations of kube-controller-manager's --leader-elect-* flags with
// controller-runtime's defaults (15 s, 10 s, 2 s). Whether to elect at all
// is serve's --leader-elect (the chart sets it). A leader that cannot renew
// within RenewDeadline exits, so that two replicas never act at once; on an
// API server too busy to answer a renewal within it (docs/scale.md: 5,000
// nodes on a starved control plane) raise RenewDeadline and LeaseDuration
// together: a crashed leader's successor then waits up to LeaseDuration.
type LeaderElectionConfig struct {
	// LeaseDuration: how long the other replicas wait after the last renewal
	// before taking over.
	LeaseDuration metav1.Duration `json:"leaseDuration,omitempty"`
	// RenewDeadline: how long the leader keeps retrying a renewal before it
	// gives up leadership (and exits). Below LeaseDuration.
	RenewDeadline metav1.Duration `json:"renewDeadline,omitempty"`
	// RetryPeriod: between two attempts to acquire or renew.
	RetryPeriod metav1.Duration `json:"retryPeriod,omitempty"`
}

// PriorityBoostConfig says whether trainguard writes kueue.x-k8s.io/priority-boost on
// the Workloads of training jobs from their work at risk.
type PriorityBoostConfig struct {
	// Enabled says Kueue runs with its PriorityBoost feature gate (alpha,
	// off by default): without it Kueue ignores the annotation, so
	// trainguard writes none unless this is true.
	Enabled bool `json:"enabled,omitempty"`
	// MaxBoost bounds every boost; each job's is further kept strictly
	// below the next (Workload)PriorityClass above its own priority.
	MaxBoost *int32 `json:"maxBoost,omitempty"`
	// MinInterval: at most one boost change per Workload this often.
	MinInterval *metav1.Duration `json:"minInterval,omitempty"`
}

// NodeWarningsConfig says which node conditions and taints warn of a
// node's loss and how trainguard answers one: each job with a rank on the
// node is asked, once, to commit a checkpoint now and train on.
type NodeWarningsConfig struct {
	// Enabled runs the node-warning controller (with the rescheduler, whose
	// caches it shares).
	Enabled *bool `json:"enabled,omitempty"`
	// Conditions are node conditions as Type=Status (Status True, False or
	// Unknown): a node whose condition of that type has that status warns.
	// An empty list listens to no condition.
	Conditions []string `json:"conditions,omitempty"`
	// Taints are taint keys: a node with a taint of that key (any value or
	// effect) warns. Empty by default.
	Taints []string `json:"taints,omitempty"`
	// CommitTimeout bounds one request: the trainer has this long from the
	// request to commit the step it acknowledged.
	CommitTimeout metav1.Duration `json:"commitTimeout"`
	// MinInterval: at most one request per job this often, however often
	// its nodes' warnings come and go.
	MinInterval metav1.Duration `json:"minInterval"`
	// BrakeThreshold: when more than this fraction of the nodes carrying
	// managed pods warn at once (and at least BrakeMinNodes of them), the
	// warning source is suspected, not the nodes, and no request is sent
	// until it clears. 1 disables the brake.
	BrakeThreshold float64 `json:"brakeThreshold,omitempty"`
	// BrakeMinNodes: the brake needs at least this many warning nodes.
	BrakeMinNodes int `json:"brakeMinNodes,omitempty"`
}

// ReschedulerConfig holds the rescheduler's settings (docs/rescheduler.md);
// the rescheduler reads this block itself (rescheduler.Options is this
// type). Each field's flag is the kebab-case of its key
// (internal/config.FlagName): nodeLostGrace is --node-lost-grace.
type ReschedulerConfig struct {
	// Enabled runs the controller (flag --rescheduler). When false, no pod
	// is deleted or recreated and the pod webhook avoids no node.
	Enabled *bool `json:"enabled,omitempty"`
	// NodeLostGrace: how long a node may be NotReady or Unknown before its
	// training pods count as lost. Short blips (kubelet restarts) must not
	// move a job.
	NodeLostGrace metav1.Duration `json:"nodeLostGrace"`
	// GraceOverTime: with fault-scheduling grace, how long a graceful
	// delete may hang on an unreachable node before the pod is
	// force-deleted, so its replacement can start.
	GraceOverTime metav1.Duration `json:"graceOverTime"`
	// BadNodeTTL: how long a node stays recorded as bad for a job.
	BadNodeTTL metav1.Duration `json:"badNodeTTL"`
	// MaxBadNodes bounds the record per job, so the anti-affinity stays
	// small and a job can never exclude itself from the whole cluster for long.
	MaxBadNodes int `json:"maxBadNodes,omitempty"`
	// UnknownExitCodeRetryable treats exit codes outside kubeflow's ExitCode
	// table (e.g. 3, 134, 255) as retryable instead of permanent.
	UnknownExitCodeRetryable bool `json:"unknownExitCodeRetryable,omitempty"`
	// BackoffBase and BackoffMax bound the exponential backoff between
	// reschedule rounds of one job: round n+1 starts no earlier than
	// min(BackoffBase*2^(n-1), BackoffMax) after round n. Pods of the job
	// that need action within BackoffBase of a round's start join that round.
	BackoffBase metav1.Duration `json:"backoffBase"`
	BackoffMax  metav1.Duration `json:"backoffMax"`
	// ForceDeleteAfter: how long a node must have been unreachable (its
	// kubelet silent, or Ready not True) before pods on it may be
	// force-deleted, bypassing PodDisruptionBudgets. A node object that is
	// gone needs no wait. Below it, pods are only ever evicted.
	ForceDeleteAfter metav1.Duration `json:"forceDeleteAfter"`
	// LeaseLostAfter: how long a node's kubelet may go without renewing its
	// Lease (as this process observes it) before the node counts as lost,
	// ahead of the node lifecycle controller's NotReady.
	LeaseLostAfter metav1.Duration `json:"leaseLostAfter"`
	// NodeEvictionRate and NodeEvictionBurst: the token bucket on the nodes
	// acted on (pods evicted or deleted off them), as kube-controller-manager's
	// --node-eviction-rate. A rate of 0 stops all action.
	NodeEvictionRate  *float64 `json:"nodeEvictionRate,omitempty"`
	NodeEvictionBurst int      `json:"nodeEvictionBurst,omitempty"`
	// UnhealthyZoneThreshold: the partition brake, as kube-controller-manager's
	// --unhealthy-zone-threshold: every action in a zone stops when more than
	// this fraction of the zone's nodes that carry managed pods are
	// unhealthy (and at least 3 of them). 1 disables it.
	UnhealthyZoneThreshold float64 `json:"unhealthyZoneThreshold,omitempty"`
	// UnhealthyClusterThreshold: the cluster-wide brake: every action stops
	// when more than this fraction of all nodes that carry managed pods are
	// unhealthy, or of all node Leases silent (and at least 2): the control
	// plane or trainguard's own view is then the likelier fault. 1 disables it.
	UnhealthyClusterThreshold float64 `json:"unhealthyClusterThreshold,omitempty"`
	// RetryEvictionRate and RetryEvictionBurst: the per-namespace token
	// bucket on pods evicted for a retryable exit, apart from the node
	// bucket, so one tenant's retries never delay another's node loss. A
	// rate of 0 stops exit retries.
	RetryEvictionRate  *float64 `json:"retryEvictionRate,omitempty"`
	RetryEvictionBurst int      `json:"retryEvictionBurst,omitempty"`
	// ConcurrentReconciles: pods the rescheduler judges and acts on at
	// once (controller-runtime's MaxConcurrentReconciles). An action is a
	// few API round trips (a live read, the job's record, the eviction, an
	// Event), so more workers help when the API server's latency bounds
	// the rate, not trainguard's CPU (docs/scale.md). Pods of one job that
	// race for its record are serialised by the record's resourceVersion.
	ConcurrentReconciles int `json:"concurrentReconciles,omitempty"`
}

// CheckpointConfig describes the checkpoint volume and the preStop hook.
type CheckpointConfig struct {
	// Claim is the PVC mounted for checkpoints; empty means no volume is added.
	Claim string `json:"claim,omitempty"`
	// Path is where the claim is mounted in the training container.
	Path string `json:"path,omitempty"`
	// PreStopTimeout bounds how long the agent waits for the trainer's checkpoint.
	PreStopTimeout *metav1.Duration `json:"preStopTimeout,omitempty"`
	// Interval is the default periodic checkpoint interval of every
	// training pod (the SDK's TRAINGUARD_CHECKPOINT_EVERY): 0 is off. The
	// annotation trainguard.io/checkpoint-interval overrides it per
	// namespace or job; a job's own migrator.periodic() call wins over both.
	Interval *metav1.Duration `json:"interval,omitempty"`
	// GracePeriodMargin is added to PreStopTimeout to form the minimum
	// terminationGracePeriodSeconds, leaving the trainer time to exit after the hook.
	GracePeriodMargin *metav1.Duration `json:"gracePeriodMargin,omitempty"`
	// RequireDurable refuses training pods whose checkpoints would be lost
	// with the pod (no claim); false admits them with a warning, an Event
	// and a metric. The namespace annotation
	// trainguard.io/require-durable-checkpoints can only tighten it.
	RequireDurable bool `json:"requireDurable,omitempty"`
}

// TaskDConfig controls MindCluster's TaskD port.
type TaskDConfig struct {
	Enabled *bool  `json:"enabled,omitempty"`
	Port    *int32 `json:"port,omitempty"`
}

// GPUConfig controls the default accelerator limit.
type GPUConfig struct {
	ResourceName corev1.ResourceName `json:"resourceName,omitempty"`
	// DefaultCount is set as limit (and request) on training containers that
	// have no such resource. 0 turns the default off.
	DefaultCount *int64 `json:"defaultCount,omitempty"`
	// DefaultFor says which jobs get DefaultCount: AcceleratorJobs (the
	// default: only jobs that show they want an accelerator, see
	// docs/annotations.md) or AllJobs (every training container without one).
	DefaultFor string `json:"defaultFor,omitempty"`
}

// Values of GPUConfig.DefaultFor.
const (
	GPUDefaultForAcceleratorJobs = "AcceleratorJobs"
	GPUDefaultForAllJobs         = "AllJobs"
)

// AgentConfig says where the trainguard-agent comes from and where it lands in the pod.
type AgentConfig struct {
	Image           string            `json:"image,omitempty"`
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Path is the directory of the shared emptyDir the agent is copied into.
	Path string `json:"path,omitempty"`
	// InstallCommand is what the init container runs; the target directory is appended.
	InstallCommand []string `json:"installCommand,omitempty"`
}

// TrainingContainerConfig says how the training container is picked: the
// first container whose name is in Names, in the order of Names, else the
// pod's first container.
type TrainingContainerConfig struct {
	Names []string `json:"names,omitempty"`
}

// Excluded reports whether a namespace is never mutated: one of
// ExcludedNamespaces, or a kube-* namespace. Those belong to Kubernetes and
// its add-ons (kube-public, kube-node-lease, kube-flannel, ...), never to a
// training team, and cluster-wide mode must not let trainguard's account
// create pods there (the chart's admission policy refuses it too).
func (c *Configuration) Excluded(namespace string) bool {
	return strings.HasPrefix(namespace, "kube-") || slices.Contains(c.ExcludedNamespaces, namespace)
}
