package v1alpha1

import (
	"fmt"
	"path"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if c.Checkpoint.GracePeriodMargin.Duration < 0 {
		check(field.NewPath("checkpoint", "gracePeriodMargin"), c.Checkpoint.GracePeriodMargin.Duration.String(), fmt.Errorf("must not be negative"))
	}
	if *c.TaskD.Port < 1 || *c.TaskD.Port > 65535 {
		check(field.NewPath("taskd", "port"), fmt.Sprint(*c.TaskD.Port), fmt.Errorf("must be between 1 and 65535 (to turn TaskD off, set taskd.enabled: false)"))
	}
	_, err = contract.ParseRecoverStrategy(c.RecoverStrategy)
	check(field.NewPath("recoverStrategy"), c.RecoverStrategy, err)
	_, err = contract.ParseFaultScheduling(c.FaultScheduling)
	check(field.NewPath("faultScheduling"), c.FaultScheduling, err)
	_, err = contract.ParseGPULimit(fmt.Sprint(*c.GPU.DefaultCount))
	check(field.NewPath("gpu", "defaultCount"), fmt.Sprint(*c.GPU.DefaultCount), err)
	if f := c.GPU.DefaultFor; f != GPUDefaultForAcceleratorJobs && f != GPUDefaultForAllJobs {
		errs = append(errs, field.NotSupported(field.NewPath("gpu", "defaultFor"), f, []string{GPUDefaultForAcceleratorJobs, GPUDefaultForAllJobs}))
	}
	if !path.IsAbs(c.Agent.Path) || path.Clean(c.Agent.Path) != c.Agent.Path {
		check(field.NewPath("agent", "path"), c.Agent.Path, fmt.Errorf("must be an absolute, clean path"))
	}
	for name := range c.Mutators {
		if !contains(contract.InjectionNames(), name) {
			check(field.NewPath("mutators").Key(name), name, fmt.Errorf("unknown injection; use one of %v", contract.InjectionNames()))
		}
	}
	// The annotation's own parser: 0 (never reschedule) up to its cap.
	_, err = contract.ParseMaxReschedules(fmt.Sprint(*c.MaxReschedules))
	check(field.NewPath("maxReschedules"), fmt.Sprint(*c.MaxReschedules), err)
	errs = append(errs, c.PriorityBoost.validate(field.NewPath("priorityBoost"))...)
	errs = append(errs, c.LeaderElection.validate(field.NewPath("leaderElection"))...)
	return append(errs, ValidateRescheduler(&c.Rescheduler, field.NewPath("rescheduler"))...)
}

func (b *PriorityBoostConfig) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m := *b.MaxBoost; m < 0 || m > MaxMaxBoost {
		errs = append(errs, field.Invalid(p.Child("maxBoost"), m,
			fmt.Sprintf("must be between 0 and %d (each job's boost also stays below the next priority class)", MaxMaxBoost)))
	}
	if d := b.MinInterval.Duration; d <= 0 || d > time.Hour {
		errs = append(errs, field.Invalid(p.Child("minInterval"), d.String(), "must be positive and at most 1h0m0s"))
	}
	return errs
}

// validate holds client-go's own rules (leaderelection.NewLeaderElector
// refuses anything else at start-up, with no field path): every duration
// positive, leaseDuration > renewDeadline > 1.2 × retryPeriod.
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
