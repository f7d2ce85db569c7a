package v1alpha1

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// ValidateRescheduler refuses settings the rescheduler cannot work with.
// p is the block's path (rescheduler); each error names its field and the fix.
func ValidateRescheduler(r *ReschedulerConfig, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, d := range map[string]metav1.Duration{"nodeLostGrace": r.NodeLostGrace, "graceOverTime": r.GraceOverTime,
		"badNodeTTL": r.BadNodeTTL, "backoffBase": r.BackoffBase, "backoffMax": r.BackoffMax, "forceDeleteAfter": r.ForceDeleteAfter,
		"leaseLostAfter": r.LeaseLostAfter} {
		if d.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child(name), d.Duration.String(), "must be positive"))
		}
	}
	if r.MaxBadNodes < 1 {
		errs = append(errs, field.Invalid(p.Child("maxBadNodes"), r.MaxBadNodes, fmt.Sprintf("must be at least 1 (unset takes the default, %d)", DefaultMaxBadNodes)))
	}
	if r.NodeEvictionBurst < 1 {
		errs = append(errs, field.Invalid(p.Child("nodeEvictionBurst"), r.NodeEvictionBurst, "must be at least 1 (to stop all action, set nodeEvictionRate: 0)"))
	}
	errs = append(errs, rate(p.Child("nodeEvictionRate"), r.NodeEvictionRate, "0 stops all action")...)
	if t := r.UnhealthyZoneThreshold; t <= 0 || t > 1 {
		errs = append(errs, field.Invalid(p.Child("unhealthyZoneThreshold"), t, "must be above 0 and at most 1 (1 disables the brake)"))
	}
	if t := r.UnhealthyClusterThreshold; t <= 0 || t > 1 {
		errs = append(errs, field.Invalid(p.Child("unhealthyClusterThreshold"), t, "must be above 0 and at most 1 (1 disables the brake)"))
	}
	errs = append(errs, rate(p.Child("retryEvictionRate"), r.RetryEvictionRate, "0 stops retries of retryable exits")...)
	if r.RetryEvictionBurst < 1 {
		errs = append(errs, field.Invalid(p.Child("retryEvictionBurst"), r.RetryEvictionBurst, "must be at least 1 (to stop retries, set retryEvictionRate: 0)"))
	}
	if n := r.ConcurrentReconciles; n < 1 || n > MaxConcurrentReconciles {
		errs = append(errs, field.Invalid(p.Child("concurrentReconciles"), n, fmt.Sprintf("must be between 1 and %d", MaxConcurrentReconciles)))
	}
	if r.BackoffMax.Duration < r.BackoffBase.Duration {
		errs = append(errs, field.Invalid(p.Child("backoffMax"), r.BackoffMax.Duration.String(), "must not be below backoffBase"))
	}
	sortErrors(errs)
	return errs
}

// rate checks a token bucket's rate; nil is only possible in a block
// built in code without SetDefaults.
func rate(p *field.Path, r *float64, zero string) field.ErrorList {
	switch {
	case r == nil:
		return field.ErrorList{field.Required(p, "set a rate ("+zero+")")}
	case *r < 0:
		return field.ErrorList{field.Invalid(p, *r, "must not be negative ("+zero+")")}
	}
	return nil
}

func sortErrors(errs field.ErrorList) {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
}

// Validate checks a defaulted Configuration. It applies the annotation
// rules to the file's values too, so the config file can never set what an
// annotation could not.
func Validate(c *Configuration) field.ErrorList {
	var errs field.ErrorList
	check := func(p *field.Path, v string, err error) {
		if err != nil {
			errs = append(errs, field.Invalid(p, v, err.Error()))
		}
	}
	if c.Checkpoint.Claim != "" {
		_, err := contract.ParseCheckpointClaim(c.Checkpoint.Claim)
		check(field.NewPath("checkpoint", "claim"), c.Checkpoint.Claim, err)
	}
	_, err := contract.ParseCheckpointPath(c.Checkpoint.Path)
	check(field.NewPath("checkpoint", "path"), c.Checkpoint.Path, err)
	_, err = contract.ParsePreStopTimeout(c.Checkpoint.PreStopTimeout.Duration.String())
	check(field.NewPath("checkpoint", "preStopTimeout"), c.Checkpoint.PreStopTimeout.Duration.String(), err)
	_, err = contract.ParseCheckpointInterval(c.Checkpoint.Interval.Duration.String())
	check(field.NewPath("checkpoint", "interval"), c.Checkpoint.Interval.Duration.String(), err)
	if c.Checkpoint.GracePeriodMargin.Duration < 0 {
		check(field.NewPath("checkpoint", "gracePeriodMargin"), c.Checkpoint.GracePeriodMargin.Duration.String(), fmt.Errorf("must not be negative"))
	}
	if *c.TaskD.Port < 1 || *c.TaskD.Port > 65535 {
		check(field.NewPath("taskd", "port"), fmt.Sprint(*c.TaskD.Port), fmt.Errorf("must be between 1 and 65535 (to turn TaskD off, set taskd.enabled: false)"))
	}
	_, err = contract.ParseRecoverStrategy(c.RecoverStrategy)
	check(field.NewPath("recoverStrategy"), c.RecoverStrategy, err)
	_, err = contract.ParseAdmissionMode(c.AdmissionMode)
	check(field.NewPath("admissionMode"), c.AdmissionMode, err)
	_, err = contract.ParseFaultScheduling(c.FaultScheduling)
	check(field.NewPath("faultScheduling"), c.FaultScheduling, err)
	_, err = contract.ParseGPULimit(fmt.Sprint(*c.GPU.DefaultCount))
	check(field.NewPath("gpu", "defaultCount"), fmt.Sprint(*c.GPU.DefaultCount), err)
	if f := c.GPU.DefaultFor; f != GPUDefaultForAcceleratorJobs && f != GPUDefaultForAllJobs {
		errs = append(errs, field.NotSupported(field.NewPath("gpu", "defaultFor"), f, []string{GPUDefaultForAcceleratorJobs, GPUDefaultForAllJobs}))
	}
	check(field.NewPath("gpu", "resourceName"), string(c.GPU.ResourceName), extendedResourceName(string(c.GPU.ResourceName)))
	switch p := c.Agent.ImagePullPolicy; p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("agent", "imagePullPolicy"), p,
			[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
	}
	_, err = contract.ParseAgentPath(c.Agent.Path)
	check(field.NewPath("agent", "path"), c.Agent.Path, err)
	for i, name := range c.TrainingContainer.Names {
		check(field.NewPath("trainingContainer", "names").Index(i), name, dnsLabel(name, "a container name"))
	}
	for i, ns := range c.ExcludedNamespaces {
		check(field.NewPath("excludedNamespaces").Index(i), ns, dnsLabel(ns, "a namespace name, not a pattern"))
	}
	for name := range c.Mutators {
		if !slices.Contains(contract.InjectionNames(), name) {
			check(field.NewPath("mutators").Key(name), name, fmt.Errorf("unknown injection; use one of %v", contract.InjectionNames()))
		}
	}
	// The annotation's own parser: 0 (never reschedule) up to its cap.
	_, err = contract.ParseMaxReschedules(fmt.Sprint(*c.MaxReschedules))
	check(field.NewPath("maxReschedules"), fmt.Sprint(*c.MaxReschedules), err)
	errs = append(errs, c.PriorityBoost.validate(field.NewPath("priorityBoost"))...)
	errs = append(errs, c.LeaderElection.validate(field.NewPath("leaderElection"))...)
	errs = append(errs, ValidateNodeWarnings(&c.NodeWarnings, field.NewPath("nodeWarnings"))...)
	resched := append(ValidateRescheduler(&c.Rescheduler, field.NewPath("rescheduler")), reschedulerFloors(&c.Rescheduler, field.NewPath("rescheduler"))...)
	sortErrors(resched)
	return append(errs, resched...)
}

// reschedulerFloors are the lower bounds of the rescheduler's timing that
// hold for what an operator writes (the file, the flags, the chart), not
// for ValidateRescheduler's every Configuration: the suites that run the
// rescheduler against a real API server build theirs in code with the
// kubelet's time compressed (2 s grace, 4 s Leases) and need no wait of
// real kubelets. A positive value below them is refused here with why.
func reschedulerFloors(r *ReschedulerConfig, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		name     string
		v, floor time.Duration
		why      string
	}{
		{"leaseLostAfter", r.LeaseLostAfter.Duration, MinLeaseLostAfter, fmt.Sprintf("twice the kubelet's node Lease renewal interval (%s by default): "+
			"the brakes count a node silent at half this bound, so below it healthy nodes look silent before each renewal "+
			"and the cluster brake can hold every action, a real node loss included; set it to %s or more (default %s), "+
			"or to twice the interval of kubelets that renew less often", KubeletLeaseRenewInterval, MinLeaseLostAfter, DefaultLeaseLostAfter)},
		{"nodeLostGrace", r.NodeLostGrace.Duration, MinNodeLostGrace, fmt.Sprintf("a restarting kubelet reports NotReady for a few seconds "+
			"and posts its status every %s; a shorter grace moves jobs over a kubelet restart", KubeletLeaseRenewInterval)},
		{"forceDeleteAfter", r.ForceDeleteAfter.Duration, MinForceDeleteAfter, "a force delete bypasses PodDisruptionBudgets and the kubelet's " +
			"confirmation, so the node must have missed at least one kubelet heartbeat first"},
	} {
		// Zero and negative values are ValidateRescheduler's ("must be positive").
		if f.v > 0 && f.v < f.floor {
			errs = append(errs, field.Invalid(p.Child(f.name), f.v.String(), fmt.Sprintf("must be at least %s: %s", f.floor, f.why)))
		}
	}
	return errs
}

// extendedResourceName is the API server's test of an extended resource
// (k8s.io/kubernetes pkg/apis/core/helper.IsExtendedResourceName, not in
// a module trainguard can import): a name with a domain outside
// kubernetes.io, not starting with requests., that is still a qualified
// name with the quota prefix requests. in front. Any other name as a
// container's limit makes the API server refuse every injected pod.
func extendedResourceName(name string) error {
	const want = "must be an extended resource name such as nvidia.com/gpu (a domain outside kubernetes.io, a slash, a name), " +
		"or the API server refuses every pod it is added to"
	switch {
	case !strings.Contains(name, "/"):
		return fmt.Errorf("%s: %q has no domain", want, name)
	case strings.Contains(name, corev1.ResourceDefaultNamespacePrefix):
		return fmt.Errorf("%s: %q is in Kubernetes' own domain", want, name)
	case strings.HasPrefix(name, corev1.DefaultResourceRequestsPrefix):
		return fmt.Errorf("%s: %q starts with the quota prefix %s", want, name, corev1.DefaultResourceRequestsPrefix)
	}
	if errs := validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix + name); len(errs) > 0 {
		return fmt.Errorf("%s: %s", want, strings.Join(errs, "; "))
	}
	return nil
}

// dnsLabel checks a container's or a namespace's name: nothing else can
// ever match one, so an entry that is not a name is a mistake (a pattern,
// an empty string) that would silently match nothing.
func dnsLabel(v, what string) error {
	if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
		return fmt.Errorf("must be %s (a DNS-1123 label): %s", what, strings.Join(errs, "; "))
	}
	return nil
}

func (b *PriorityBoostConfig) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m := *b.MaxBoost; m < 0 || m > MaxMaxBoost {
		errs = append(errs, field.Invalid(p.Child("maxBoost"), m,
			fmt.Sprintf("must be between 0 and %d (each job's boost also stays below the next priority class)", MaxMaxBoost)))
	}
	if d := b.MinInterval.Duration; d < MinBoostMinInterval || d > MaxBoostMinInterval {
		errs = append(errs, field.Invalid(p.Child("minInterval"), d.String(),
			fmt.Sprintf("must be between %s and %s: trainguard reads each job's work at risk every %s, and each change is a Workload write Kueue re-queues the job for",
				MinBoostMinInterval, MaxBoostMinInterval, MinBoostMinInterval)))
	}
	return errs
}

// Bounds of the node-warning settings.
const (
	// MinWarningCommitTimeout: a request, a save and a commit of even a
	// small model take seconds; below it every request would time out.
	MinWarningCommitTimeout = 5 * time.Second
	MaxWarningCommitTimeout = time.Hour
	// MinWarningMinInterval: at least one request's bound between two.
	MinWarningMinInterval = 10 * time.Second
	MaxWarningMinInterval = 24 * time.Hour
	// MaxWarningRules bounds each list: every node event is matched against them.
	MaxWarningRules = 32
)

// ValidateNodeWarnings refuses node-warning settings the controller cannot
// work with; p is the block's path (nodeWarnings).
func ValidateNodeWarnings(w *NodeWarningsConfig, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(w.Conditions) > MaxWarningRules {
		errs = append(errs, field.TooMany(p.Child("conditions"), len(w.Conditions), MaxWarningRules))
	}
	for i, c := range w.Conditions {
		if _, _, err := ParseWarningCondition(c); err != nil {
			errs = append(errs, field.Invalid(p.Child("conditions").Index(i), c, err.Error()))
		}
	}
	if len(w.Taints) > MaxWarningRules {
		errs = append(errs, field.TooMany(p.Child("taints"), len(w.Taints), MaxWarningRules))
	}
	for i, k := range w.Taints {
		if bad := validation.IsQualifiedName(k); len(bad) > 0 {
			errs = append(errs, field.Invalid(p.Child("taints").Index(i), k,
				"must be a taint key such as example.com/gpu-unhealthy (a qualified name): "+strings.Join(bad, "; ")))
		}
	}
	for _, d := range []struct {
		name     string
		v        time.Duration
		min, max time.Duration
		why      string
	}{
		{"commitTimeout", w.CommitTimeout.Duration, MinWarningCommitTimeout, MaxWarningCommitTimeout, "the trainer's time from the request to the commit"},
		{"minInterval", w.MinInterval.Duration, MinWarningMinInterval, MaxWarningMinInterval, "at most one request per job this often"},
	} {
		if d.v < d.min || d.v > d.max {
			errs = append(errs, field.Invalid(p.Child(d.name), d.v.String(), fmt.Sprintf("must be between %s and %s (%s)", d.min, d.max, d.why)))
		}
	}
	if t := w.BrakeThreshold; t <= 0 || t > 1 {
		errs = append(errs, field.Invalid(p.Child("brakeThreshold"), t, "must be above 0 and at most 1 (1 disables the brake)"))
	}
	if w.BrakeMinNodes < 1 {
		errs = append(errs, field.Invalid(p.Child("brakeMinNodes"), w.BrakeMinNodes,
			fmt.Sprintf("must be at least 1 (unset takes the default, %d; to disable the brake, set brakeThreshold: 1)", DefaultWarningBrakeMinNodes)))
	}
	return errs
}

// ParseWarningCondition splits a nodeWarnings.conditions entry, Type=Status.
func ParseWarningCondition(s string) (corev1.NodeConditionType, corev1.ConditionStatus, error) {
	typ, status, ok := strings.Cut(s, "=")
	const want = "write Type=Status, e.g. MaintenancePlanned=True"
	if !ok {
		return "", "", fmt.Errorf("no '=': %s", want)
	}
	if bad := validation.IsQualifiedName(typ); len(bad) > 0 {
		return "", "", fmt.Errorf("condition type %q is not a qualified name (%s): %s", typ, strings.Join(bad, "; "), want)
	}
	switch st := corev1.ConditionStatus(status); st {
	case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
		return corev1.NodeConditionType(typ), st, nil
	}
	return "", "", fmt.Errorf("status %q is not True, False or Unknown: %s", status, want)
}

// validate holds client-go's own rules (leaderelection.NewLeaderElector
// refuses anything else at start-up, with no field path): every duration
// positive, leaseDuration > renewDeadline > 1.2 × retryPeriod; and a
// ceiling on leaseDuration, which client-go has none of.
func (l *LeaderElectionConfig) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	lease, renew, retry := l.LeaseDuration.Duration, l.RenewDeadline.Duration, l.RetryPeriod.Duration
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"leaseDuration", lease}, {"renewDeadline", renew}, {"retryPeriod", retry}} {
		if d.v <= 0 {
			errs = append(errs, field.Invalid(p.Child(d.name), d.v.String(), "must be positive"))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// renewDeadline and retryPeriod stay below leaseDuration by the rules
	// after this one, so its ceiling bounds all three.
	if lease > MaxLeaseDuration {
		errs = append(errs, field.Invalid(p.Child("leaseDuration"), lease.String(),
			fmt.Sprintf("must be at most %s: when the leader dies, the other replicas wait this long before one takes over, and nothing is rescheduled meanwhile", MaxLeaseDuration)))
	}
	if renew >= lease {
		errs = append(errs, field.Invalid(p.Child("renewDeadline"), renew.String(),
			fmt.Sprintf("must be below leaseDuration (%s): a leader must give up before another replica may take over", lease)))
	}
	if float64(renew) <= 1.2*float64(retry) {
		errs = append(errs, field.Invalid(p.Child("retryPeriod"), retry.String(),
			fmt.Sprintf("must be below renewDeadline (%s) / 1.2, so a renewal can be retried before the deadline", renew)))
	}
	return errs
}
