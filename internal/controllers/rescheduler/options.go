package rescheduler

import (
	"time"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
)

// Options are the rescheduler's settings: the Configuration's rescheduler
// block itself (defaulted and checked where it was loaded, flags applied),
// so each setting is written once, in configv1alpha1.
type Options = configv1alpha1.ReschedulerConfig

// DefaultOptions returns the default Configuration's rescheduler block.
func DefaultOptions() Options {
	return configv1alpha1.Default().Rescheduler
}

// backoff is the minimum time between the start of round n and round n+1 (n >= 1).
func backoff(o Options, n int) time.Duration {
	d, limit := o.BackoffBase.Duration, o.BackoffMax.Duration
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
