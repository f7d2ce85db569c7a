package v1alpha1

import (
	"encoding/json"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/version"
)

// Defaults of the config file, listed in docs/config-reference.yaml (a test
// holds the two equal).
const (
	DefaultCheckpointPath    = "/checkpoint"
	DefaultPreStopTimeout    = 60 * time.Second
	DefaultGracePeriodMargin = 30 * time.Second
	DefaultTaskDPort         = 9601
	DefaultRecoverStrategy   = "recover-in-place,recover" // process faults restart in place, node faults reschedule
	DefaultFaultScheduling   = contract.FaultSchedulingGrace
	DefaultAdmissionMode     = contract.ModeEnforce
	DefaultGPUResource       = "nvidia.com/gpu"
	DefaultGPUCount          = 1
	DefaultAgentImage        = version.Image // pinned to this release, never latest
	DefaultAgentPath         = "/opt/trainguard/bin"
	DefaultMaxReschedules    = 10

	// Priority boost defaults (docs/preemption.md): small next to the
	// usual gaps between priority classes, which bound it anyway.
	DefaultMaxBoost         = 100
	MaxMaxBoost             = 1000000
	DefaultBoostMinInterval = time.Minute

	// Node warnings (docs/node-warnings.md). The commit bound leaves a
	// large model's save time; the interval keeps a flapping condition to
	// one checkpoint per job per interval; the brake is the rescheduler's
	// cluster brake (DefaultUnhealthyClusterThreshold, at least 2 nodes).
	DefaultWarningCommitTimeout  = 2 * time.Minute
	DefaultWarningMinInterval    = 5 * time.Minute
	DefaultWarningBrakeThreshold = 0.5
	DefaultWarningBrakeMinNodes  = 2
	// Leader election: controller-runtime's (and kube-controller-manager's)
	// defaults.
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second

	// Rescheduler defaults (docs/rescheduler.md).
	DefaultNodeLostGrace = 60 * time.Second
	DefaultGraceOverTime = 900 * time.Second
	DefaultBadNodeTTL    = time.Hour
	DefaultMaxBadNodes   = 16
	DefaultBackoffBase   = 10 * time.Second
	DefaultBackoffMax    = 5 * time.Minute

	// DefaultLeaseLostAfter: two renewals of a kubelet's node Lease missed
	// and half a third (renewed every 10 s, jittered by up to 4 %). The
	// brakes count a Lease silent at half of it, 12.5 s, past one renewal
	// with 2 s to spare for the watch, so a healthy node never counts; a
	// stale view of many Leases engages the cluster brake, and the Lease
	// of a lost node is read live before its pods are acted on
	// (docs/rescheduler.md). The kubelet's own Lease duration, 40 s, was
	// the default before those guards.
	DefaultLeaseLostAfter = 25 * time.Second
	// DefaultForceDeleteAfter: a node unreachable this long (its kubelet
	// silent, or Ready not True) has its pods force-deleted, so the
	// replacement starts without waiting for a kubelet that may never come
	// back. Safe because a force-deleted pod that still runs (a partition)
	// can never commit over its replacement's checkpoints (fencing,
	// docs/checkpoint-protocol.md), and its kubelet kills it on return.
	// Kubernetes itself waits 300 s and then only evicts.
	DefaultForceDeleteAfter = 25 * time.Second
	// DefaultNodeEvictionRate is the node lifecycle controller's own
	// default: one node every 10 s.
	DefaultNodeEvictionRate = 0.1
	// DefaultNodeEvictionBurst lets an incident of up to 3 nodes (a rack, a
	// switch) be handled at once; the node lifecycle controller has a burst
	// of 1 but evicts only after 5 minutes, trainguard after 60 s.
	DefaultNodeEvictionBurst = 3
	// DefaultUnhealthyZoneThreshold is the node lifecycle controller's.
	DefaultUnhealthyZoneThreshold = 0.55
	// DefaultUnhealthyClusterThreshold: more than half of all carrier nodes
	// (or node Leases) dead at once is the control plane's or trainguard's
	// problem far more often than the hardware's; the node lifecycle
	// controller likewise stops evicting when every zone is disrupted.
	DefaultUnhealthyClusterThreshold = 0.5
	// DefaultRetryEvictionRate and DefaultRetryEvictionBurst: one pod a
	// second per namespace, a whole job's workers (32) at once; the job's
	// own reschedule backoff and cap bound the rest.
	DefaultRetryEvictionRate  = 1.0
	DefaultRetryEvictionBurst = 32
	// DefaultConcurrentReconciles stays 1: at 5,000 nodes
	// (docs/history/scale-rounds.md, third round) 4 workers decided fewer
	// pods than 1, each recomputing the brakes' per-zone node counts on a
	// heap already at GOMEMLIMIT.
	// The count is now one pass per second for every zone (fourth round:
	// one worker decides a churn's exits in 0.6 s, a braked zone of 4,861
	// pods within 5 s); 4 workers were not measured again, and one worker
	// acts on about 10 pods a second when nothing holds it.
	DefaultConcurrentReconciles = 1
	MaxConcurrentReconciles     = 64
)

// Bounds an operator's file and flags are held to (Validate), beyond what
// the code could run with: each value outside them was accepted once and
// quietly broke what the setting is for.
const (
	// KubeletLeaseRenewInterval is how often a kubelet renews its node
	// Lease by default (a quarter of nodeLeaseDurationSeconds), and about
	// as often as it posts its node status (nodeStatusUpdateFrequency).
	KubeletLeaseRenewInterval = 10 * time.Second
	// MinLeaseLostAfter: the brakes count a node silent at half of
	// leaseLostAfter; below two renewal intervals a healthy kubelet's
	// Lease looks silent just before each renewal, and once enough of
	// them do the cluster brake holds every action, a real loss included.
	MinLeaseLostAfter = 2 * KubeletLeaseRenewInterval
	// MinNodeLostGrace: a restarting kubelet reports NotReady for a few
	// seconds and the next status comes one interval later; a shorter
	// grace moves jobs off a node over a kubelet restart.
	MinNodeLostGrace = KubeletLeaseRenewInterval
	// MinForceDeleteAfter: a force delete bypasses PodDisruptionBudgets and
	// the kubelet's confirmation, so the node must have missed at least
	// one heartbeat first, whatever the loss bounds say.
	MinForceDeleteAfter = KubeletLeaseRenewInterval
	// MinBoostMinInterval is the boost controller's resync: every boost
	// change is a Workload write Kueue re-queues the job for, and a shorter
	// interval only lets those writes follow each other at watch speed.
	MinBoostMinInterval = 10 * time.Second
	MaxBoostMinInterval = time.Hour
	// MaxLeaseDuration bounds the leader election (renewDeadline and
	// retryPeriod stay below it): a crashed leader's successor waits up to
	// the lease duration, with no rescheduling meanwhile. Five minutes is
	// when Kubernetes itself starts evicting from a lost node.
	MaxLeaseDuration = 5 * time.Minute
)

// Default returns the configuration used when no file is given.
func Default() *Configuration {
	c := &Configuration{}
	SetDefaults(c)
	return c
}

// SetDefaults fills every unset field (nil, or the zero value where zero
// is not a setting of its own). It is idempotent.
func SetDefaults(c *Configuration) {
	c.APIVersion, c.Kind = APIVersion, Kind
	setZeroDefaults(&c.Rescheduler)
	setLeaderElectionDefaults(&c.LeaderElection)
	setNodeWarningsZeroDefaults(&c.NodeWarnings)
	fill(c)
}

// Decode decodes a file's JSON over the defaults: a key the file leaves
// out keeps its default, and a zero the file writes stays zero, for
// Validate to refuse with its path rather than default silently. The
// TypeMeta is the file's.
func Decode(raw []byte) (*Configuration, error) {
	c := Default()
	c.TypeMeta = metav1.TypeMeta{}
	err := json.Unmarshal(raw, c)
	// Not SetDefaults, which would default a zero the file wrote: only what
	// a null or an empty list left unset.
	fill(c)
	return c, err
}

// fill defaults the fields whose unset value a file can write (null, an
// empty list or string).
func fill(c *Configuration) {
	setReschedulerDefaults(&c.Rescheduler)
	if c.PriorityBoost.MaxBoost == nil {
		c.PriorityBoost.MaxBoost = ptr(int32(DefaultMaxBoost))
	}
	if c.PriorityBoost.MinInterval == nil {
		c.PriorityBoost.MinInterval = &metav1.Duration{Duration: DefaultBoostMinInterval}
	}
	if c.NodeWarnings.Enabled == nil {
		c.NodeWarnings.Enabled = ptr(true)
	}
	if c.NodeWarnings.Conditions == nil {
		c.NodeWarnings.Conditions = DefaultWarningConditions()
	}
	if len(c.NodeWarnings.Taints) == 0 {
		c.NodeWarnings.Taints = nil // none, however written
	}
	if c.Checkpoint.Path == "" {
		c.Checkpoint.Path = DefaultCheckpointPath
	}
	if c.Checkpoint.PreStopTimeout == nil {
		c.Checkpoint.PreStopTimeout = &metav1.Duration{Duration: DefaultPreStopTimeout}
	}
	if c.Checkpoint.Interval == nil {
		c.Checkpoint.Interval = &metav1.Duration{}
	}
	if c.Checkpoint.GracePeriodMargin == nil {
		c.Checkpoint.GracePeriodMargin = &metav1.Duration{Duration: DefaultGracePeriodMargin}
	}
	if c.TaskD.Enabled == nil {
		c.TaskD.Enabled = ptr(true)
	}
	if c.TaskD.Port == nil {
		c.TaskD.Port = ptr(int32(DefaultTaskDPort))
	}
	if c.RecoverStrategy == "" {
		c.RecoverStrategy = DefaultRecoverStrategy
	}
	if c.AdmissionMode == "" {
		c.AdmissionMode = DefaultAdmissionMode
	}
	if c.FaultScheduling == "" {
		c.FaultScheduling = DefaultFaultScheduling
	}
	if c.GPU.ResourceName == "" {
		c.GPU.ResourceName = DefaultGPUResource
	}
	if c.GPU.DefaultCount == nil {
		c.GPU.DefaultCount = ptr(int64(DefaultGPUCount))
	}
	if c.GPU.DefaultFor == "" {
		c.GPU.DefaultFor = GPUDefaultForAcceleratorJobs
	}
	if c.Agent.Image == "" {
		c.Agent.Image = DefaultAgentImage
	}
	if c.Agent.ImagePullPolicy == "" {
		c.Agent.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.Agent.Path == "" {
		c.Agent.Path = DefaultAgentPath
	}
	if len(c.Agent.InstallCommand) == 0 {
		c.Agent.InstallCommand = []string{"/" + contract.AgentBinaryName, "install"}
	}
	if len(c.TrainingContainer.Names) == 0 {
		c.TrainingContainer.Names = []string{"pytorch", "ascend"}
	}
	if c.MaxReschedules == nil {
		c.MaxReschedules = ptr(DefaultMaxReschedules)
	}
	if !slices.Contains(c.ExcludedNamespaces, "kube-system") {
		c.ExcludedNamespaces = append(c.ExcludedNamespaces, "kube-system")
	}
}

func setReschedulerDefaults(r *ReschedulerConfig) {
	if r.Enabled == nil {
		r.Enabled = ptr(true)
	}
	if r.NodeEvictionRate == nil {
		r.NodeEvictionRate = ptr(DefaultNodeEvictionRate)
	}
	if r.RetryEvictionRate == nil {
		r.RetryEvictionRate = ptr(DefaultRetryEvictionRate)
	}
}

// setZeroDefaults defaults the fields whose zero value is not a setting
// (a Configuration built in code leaves them zero).
func setZeroDefaults(r *ReschedulerConfig) {
	for _, d := range []struct {
		field *metav1.Duration
		def   time.Duration
	}{
		{&r.NodeLostGrace, DefaultNodeLostGrace}, {&r.GraceOverTime, DefaultGraceOverTime}, {&r.BadNodeTTL, DefaultBadNodeTTL},
		{&r.BackoffBase, DefaultBackoffBase}, {&r.BackoffMax, DefaultBackoffMax}, {&r.ForceDeleteAfter, DefaultForceDeleteAfter},
		{&r.LeaseLostAfter, DefaultLeaseLostAfter},
	} {
		if d.field.Duration == 0 {
			d.field.Duration = d.def
		}
	}
	for _, n := range []struct {
		field *int
		def   int
	}{{&r.MaxBadNodes, DefaultMaxBadNodes}, {&r.NodeEvictionBurst, DefaultNodeEvictionBurst}, {&r.RetryEvictionBurst, DefaultRetryEvictionBurst},
		{&r.ConcurrentReconciles, DefaultConcurrentReconciles}} {
		if *n.field == 0 {
			*n.field = n.def
		}
	}
	for _, f := range []struct {
		field *float64
		def   float64
	}{{&r.UnhealthyZoneThreshold, DefaultUnhealthyZoneThreshold}, {&r.UnhealthyClusterThreshold, DefaultUnhealthyClusterThreshold}} {
		if *f.field == 0 {
			*f.field = f.def
		}
	}
}

// DefaultWarningConditions are Kubernetes 1.37's NodeLifecycleConditions
// (alpha): a node about to be maintained, drained or shut down.
func DefaultWarningConditions() []string {
	return []string{"MaintenancePlanned=True", "MaintenanceInProgress=True", "DrainInProgress=True", "GracefulNodeShutdownInProgress=True"}
}

// setNodeWarningsZeroDefaults defaults the node-warning settings whose
// zero is not a setting.
func setNodeWarningsZeroDefaults(w *NodeWarningsConfig) {
	for _, d := range []struct {
		field *metav1.Duration
		def   time.Duration
	}{{&w.CommitTimeout, DefaultWarningCommitTimeout}, {&w.MinInterval, DefaultWarningMinInterval}} {
		if d.field.Duration == 0 {
			d.field.Duration = d.def
		}
	}
	if w.BrakeThreshold == 0 {
		w.BrakeThreshold = DefaultWarningBrakeThreshold
	}
	if w.BrakeMinNodes == 0 {
		w.BrakeMinNodes = DefaultWarningBrakeMinNodes
	}
}

// setLeaderElectionDefaults defaults the durations left zero (a zero
// duration is no setting of its own).
func setLeaderElectionDefaults(l *LeaderElectionConfig) {
	for _, d := range []struct {
		field *metav1.Duration
		def   time.Duration
	}{{&l.LeaseDuration, DefaultLeaseDuration}, {&l.RenewDeadline, DefaultRenewDeadline}, {&l.RetryPeriod, DefaultRetryPeriod}} {
		if d.field.Duration == 0 {
			d.field.Duration = d.def
		}
	}
}

// defaulted reports whether SetDefaults ran (readers need its pointers set).
func (c *Configuration) defaulted() bool {
	return c.Checkpoint.PreStopTimeout != nil && c.Checkpoint.GracePeriodMargin != nil && c.Checkpoint.Interval != nil && c.TaskD.Enabled != nil && c.GPU.DefaultCount != nil &&
		c.TaskD.Port != nil && c.MaxReschedules != nil && c.Rescheduler.Enabled != nil && c.Rescheduler.NodeEvictionRate != nil &&
		c.Rescheduler.RetryEvictionRate != nil && c.PriorityBoost.MaxBoost != nil && c.PriorityBoost.MinInterval != nil &&
		c.NodeWarnings.Enabled != nil && c.NodeWarnings.Conditions != nil && c.NodeWarnings.CommitTimeout.Duration != 0 &&
		c.NodeWarnings.MinInterval.Duration != 0 && c.NodeWarnings.BrakeThreshold != 0 && c.NodeWarnings.BrakeMinNodes != 0 &&
		c.LeaderElection.LeaseDuration.Duration != 0 && c.LeaderElection.RenewDeadline.Duration != 0 && c.LeaderElection.RetryPeriod.Duration != 0
}

func ptr[T any](v T) *T { return &v }

// WithDefaults returns c when every default is set, otherwise a defaulted
// copy: a Configuration built in code (a test, a tool) need not be
// parsed, and c itself is never changed.
func (c *Configuration) WithDefaults() *Configuration {
	if c.defaulted() {
		return c
	}
	d := *c
	SetDefaults(&d)
	return &d
}
