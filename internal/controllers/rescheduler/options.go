package rescheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/config"
)

// Options configure the rescheduler; `trainguard serve` binds them to flags.
type Options struct {
	// Enabled runs the controller. When false, no record is written and the
	// pod webhook avoids no node.
	Enabled bool
	// NodeLostGrace is how long a node may be NotReady or Unknown before its
	// pods count as lost. Short blips (kubelet restarts) must not move a job.
	NodeLostGrace time.Duration
	// GraceOverTime is how long a graceful delete may hang on an unreachable
	// node before the pod is force-deleted, so its replacement can start.
	GraceOverTime time.Duration
	// BadNodeTTL is how long a node stays recorded as bad for a job.
	BadNodeTTL time.Duration
	// MaxBadNodes bounds the record per job, so the anti-affinity stays small
	// and a job can never exclude itself from the whole cluster for long.
	MaxBadNodes int
	// DefaultRetryable classifies exit codes the kubeflow ExitCode policy leaves undefined.
	DefaultRetryable bool
	// BackoffBase and BackoffMax bound the exponential backoff between
	// reschedule rounds of one job: round n+1 starts no earlier than
	// min(BackoffBase*2^(n-1), BackoffMax) after round n. Pods of the job that
	// need action within BackoffBase of a round's start join that round.
	BackoffBase, BackoffMax time.Duration
	// ForceDeleteAfter is how long a node must have been unreachable (its
	// kubelet silent, or Ready not True) before a pod on it may be
	// force-deleted, which bypasses its PodDisruptionBudget. A node object
	// that is gone needs no wait. Below it, pods are only ever evicted.
	ForceDeleteAfter time.Duration
	// LeaseLostAfter is how long a node's kubelet may go without renewing
	// its Lease (as this process observes it) before the node counts as
	// lost, ahead of the node lifecycle controller's NotReady.
	LeaseLostAfter time.Duration
	// NodeEvictionRate and NodeEvictionBurst are the token bucket on the
	// nodes acted on (pods evicted or deleted off them), as the node
	// lifecycle controller's --node-eviction-rate.
	NodeEvictionRate  float64
	NodeEvictionBurst int
	// UnhealthyZoneThreshold stops every action in a zone when more than
	// this fraction of the zone's nodes that carry managed pods are
	// unhealthy (and at least minUnhealthyNodes of them), as the node
	// lifecycle controller's --unhealthy-zone-threshold.
	UnhealthyZoneThreshold float64
	// UnhealthyClusterThreshold stops every action when more than this
	// fraction of all nodes that carry managed pods are unhealthy, or of all
	// node Leases silent (and at least 2): the control plane or trainguard's
	// own view is then the likelier fault. 1 disables it.
	UnhealthyClusterThreshold float64
	// RetryEvictionRate and RetryEvictionBurst are the token bucket, per
	// namespace, on pods evicted for a retryable exit; lost nodes take the
	// node bucket instead, so one tenant's retries never delay another's
	// node loss.
	RetryEvictionRate  float64
	RetryEvictionBurst int
	// Namespace is trainguard's own namespace, where the bad-node records
	// live. Not a flag of its own: `serve --namespace` sets it.
	Namespace string
}

// DefaultOptions returns the options of the default Configuration (whose
// defaults are the one place they are written).
func DefaultOptions() Options {
	return OptionsFrom(config.DefaultConfig().Rescheduler, "")
}

// OptionsFrom reads the rescheduler's block of a defaulted Configuration;
// flags (BindFlags) then only override it. namespace is trainguard's own,
// where the records live.
func OptionsFrom(c config.ReschedulerConfig, namespace string) Options {
	return Options{
		Namespace:        namespace,
		Enabled:          *c.Enabled,
		NodeLostGrace:    c.NodeLostGrace.Duration,
		GraceOverTime:    c.GraceOverTime.Duration,
		BadNodeTTL:       c.BadNodeTTL.Duration,
		MaxBadNodes:      *c.MaxBadNodes,
		DefaultRetryable: c.UnknownExitCodeRetryable,
		BackoffBase:      c.BackoffBase.Duration,
		BackoffMax:       c.BackoffMax.Duration,

		ForceDeleteAfter:       c.ForceDeleteAfter.Duration,
		LeaseLostAfter:         c.LeaseLostAfter.Duration,
		NodeEvictionRate:       *c.NodeEvictionRate,
		NodeEvictionBurst:      *c.NodeEvictionBurst,
		UnhealthyZoneThreshold: *c.UnhealthyZoneThreshold,

		UnhealthyClusterThreshold: *c.UnhealthyClusterThreshold,
		RetryEvictionRate:         *c.RetryEvictionRate,
		RetryEvictionBurst:        *c.RetryEvictionBurst,
	}
}

// Config is the inverse of OptionsFrom: the Configuration block these
// options are, so `trainguard serve --print-config` shows the settings in
// effect (the file's, with every given flag applied) in the file's format.
func (o Options) Config() config.ReschedulerConfig {
	d := func(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }
	return config.ReschedulerConfig{
		Enabled:                  &o.Enabled,
		NodeLostGrace:            d(o.NodeLostGrace),
		GraceOverTime:            d(o.GraceOverTime),
		BadNodeTTL:               d(o.BadNodeTTL),
		MaxBadNodes:              &o.MaxBadNodes,
		UnknownExitCodeRetryable: o.DefaultRetryable,
		BackoffBase:              d(o.BackoffBase),
		BackoffMax:               d(o.BackoffMax),
		ForceDeleteAfter:         d(o.ForceDeleteAfter),
		LeaseLostAfter:           d(o.LeaseLostAfter),
		NodeEvictionRate:         &o.NodeEvictionRate,
		NodeEvictionBurst:        &o.NodeEvictionBurst,
		UnhealthyZoneThreshold:   &o.UnhealthyZoneThreshold,

		UnhealthyClusterThreshold: &o.UnhealthyClusterThreshold,
		RetryEvictionRate:         &o.RetryEvictionRate,
		RetryEvictionBurst:        &o.RetryEvictionBurst,
	}
}

// BindFlags registers the rescheduler's flags; the current values of o are the defaults.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "rescheduler", o.Enabled,
		"Run the rescheduling controller (leader-elected). When false, no pod is deleted or recreated and the pod webhook avoids no node.")
	fs.DurationVar(&o.NodeLostGrace, "node-lost-grace", o.NodeLostGrace,
		"How long a node may be NotReady or Unknown before its training pods count as lost and are rescheduled.")
	fs.DurationVar(&o.GraceOverTime, "grace-over-time", o.GraceOverTime,
		"With fault-scheduling=grace, how long a graceful delete may hang on an unreachable node before the pod is force-deleted.")
	fs.DurationVar(&o.BadNodeTTL, "bad-node-ttl", o.BadNodeTTL,
		"How long a node stays recorded as bad for a job (its replacement pods avoid it).")
	fs.IntVar(&o.MaxBadNodes, "max-bad-nodes", o.MaxBadNodes,
		"Most nodes recorded as bad per job; the oldest records are dropped first.")
	fs.BoolVar(&o.DefaultRetryable, "unknown-exit-code-retryable", o.DefaultRetryable,
		"Treat exit codes outside kubeflow's ExitCode table (e.g. 3, 134, 255) as retryable instead of permanent.")
	fs.DurationVar(&o.BackoffBase, "reschedule-backoff-base", o.BackoffBase,
		"First backoff between two reschedule rounds of one job; doubles each round. Pods needing action within this time of a round share it.")
	fs.DurationVar(&o.BackoffMax, "reschedule-backoff-max", o.BackoffMax,
		"Longest backoff between two reschedule rounds of one job.")
	fs.DurationVar(&o.ForceDeleteAfter, "force-delete-after", o.ForceDeleteAfter,
		"How long a node must have been unreachable (kubelet silent, or NotReady/Unknown) before pods on it may be force-deleted "+
			"(marked Failed, grace period 0, bypassing PodDisruptionBudgets); a silent kubelet is not waited for by --grace-over-time. "+
			"Below it pods are only evicted through the Eviction API. A deleted Node needs no wait. Safe because a stale trainer "+
			"cannot commit over its replacement's checkpoints (fencing, docs/checkpoint-protocol.md).")
	fs.DurationVar(&o.LeaseLostAfter, "lease-lost-after", o.LeaseLostAfter,
		"How long a node's kubelet may leave its Lease (kube-node-lease) unrenewed, as trainguard observes it, before the node's "+
			"training pods count as lost, ahead of the node lifecycle controller's NotReady. Default: the kubelet's lease duration "+
			"(it renews every 10 s), so a slow but alive kubelet is never acted on.")
	fs.Float64Var(&o.NodeEvictionRate, "node-eviction-rate", o.NodeEvictionRate,
		"Lost nodes per second the rescheduler may start acting on (evicting their training pods), cluster-wide; a token bucket like "+
			"kube-controller-manager's --node-eviction-rate (same default, 0.1 = one node every 10 s). 0 stops all action on lost nodes. "+
			"Pods retried for their exit take --retry-eviction-rate instead.")
	fs.IntVar(&o.NodeEvictionBurst, "node-eviction-burst", o.NodeEvictionBurst,
		"Nodes the rescheduler may act on at once before --node-eviction-rate applies (an incident of a rack or a switch).")
	fs.Float64Var(&o.UnhealthyZoneThreshold, "unhealthy-zone-threshold", o.UnhealthyZoneThreshold,
		"Brake: when more than this fraction of a zone's nodes that carry managed pods are NotReady/Unknown (and at least 3 of them), "+
			"a partition is suspected and nothing in the zone is evicted or deleted until it recovers (Event, log, metric "+
			"trainguard_rescheduler_brake_engaged). Same default as kube-controller-manager's --unhealthy-zone-threshold. 1 disables the brake.")
	fs.Float64Var(&o.UnhealthyClusterThreshold, "unhealthy-cluster-threshold", o.UnhealthyClusterThreshold,
		"Brake: when more than this fraction of all nodes that carry managed pods are unhealthy, or of all node Leases silent for "+
			"--lease-lost-after (and at least 2), the control plane or trainguard's own view is suspected and nothing is evicted or deleted "+
			"(Event PartitionSuspected, log, trainguard_rescheduler_brake_engaged{zone=\"(cluster)\"}). Catches what the zone brake cannot in "+
			"small zones (it needs 3 unhealthy nodes per zone). 1 disables it.")
	fs.Float64Var(&o.RetryEvictionRate, "retry-eviction-rate", o.RetryEvictionRate,
		"Pods per second, per namespace, the rescheduler may evict for a retryable exit (137, 143, ...): a token bucket apart from "+
			"--node-eviction-rate, so one tenant's failing jobs never delay another's recovery from a lost node. 0 stops exit retries.")
	fs.IntVar(&o.RetryEvictionBurst, "retry-eviction-burst", o.RetryEvictionBurst,
		"Pods of one namespace evicted at once for a retryable exit before --retry-eviction-rate applies (a whole job's workers).")
}

// Validate rejects options the controller cannot work with.
func (o *Options) Validate() error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %s", name, d))
		}
	}
	positive("node-lost-grace", o.NodeLostGrace)
	positive("grace-over-time", o.GraceOverTime)
	positive("bad-node-ttl", o.BadNodeTTL)
	positive("reschedule-backoff-base", o.BackoffBase)
	positive("reschedule-backoff-max", o.BackoffMax)
	positive("force-delete-after", o.ForceDeleteAfter)
	positive("lease-lost-after", o.LeaseLostAfter)
	if o.NodeEvictionRate < 0 {
		errs = append(errs, fmt.Errorf("--node-eviction-rate must not be negative, got %g", o.NodeEvictionRate))
	}
	if o.NodeEvictionBurst < 1 {
		errs = append(errs, fmt.Errorf("--node-eviction-burst must be at least 1, got %d", o.NodeEvictionBurst))
	}
	if o.UnhealthyZoneThreshold <= 0 || o.UnhealthyZoneThreshold > 1 {
		errs = append(errs, fmt.Errorf("--unhealthy-zone-threshold must be in (0, 1], got %g", o.UnhealthyZoneThreshold))
	}
	if o.UnhealthyClusterThreshold <= 0 || o.UnhealthyClusterThreshold > 1 {
		errs = append(errs, fmt.Errorf("--unhealthy-cluster-threshold must be in (0, 1], got %g", o.UnhealthyClusterThreshold))
	}
	if o.RetryEvictionRate < 0 {
		errs = append(errs, fmt.Errorf("--retry-eviction-rate must not be negative, got %g", o.RetryEvictionRate))
	}
	if o.RetryEvictionBurst < 1 {
		errs = append(errs, fmt.Errorf("--retry-eviction-burst must be at least 1, got %d", o.RetryEvictionBurst))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("trainguard's namespace is empty: set --namespace (or $POD_NAMESPACE); the rescheduler keeps its records there"))
	}
	if o.MaxBadNodes < 1 {
		errs = append(errs, fmt.Errorf("--max-bad-nodes must be at least 1, got %d", o.MaxBadNodes))
	}
	if o.BackoffMax < o.BackoffBase {
		errs = append(errs, fmt.Errorf("--reschedule-backoff-max (%s) must not be below --reschedule-backoff-base (%s)", o.BackoffMax, o.BackoffBase))
	}
	return errors.Join(errs...)
}

// backoff is the minimum time between the start of round n and round n+1 (n >= 1).
func (o *Options) backoff(n int) time.Duration {
	d := o.BackoffBase
	for i := 1; i < n && d < o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, o.BackoffMax)
}
