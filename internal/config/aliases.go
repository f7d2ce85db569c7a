package config

import configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"

// The admission packages (webhook, validators, policy) still name the
// versioned type through these aliases while their own restructuring is
// under way (issue 33, items 2 and 4); they are the same type and values,
// not copies. New code names configv1alpha1 directly.
type (
	// Config is configv1alpha1.Configuration.
	Config = configv1alpha1.Configuration
)

// DefaultConfig is configv1alpha1.Default.
func DefaultConfig() *Config { return configv1alpha1.Default() }

// Constants the admission packages read.
const (
	GPUDefaultForAllJobs         = configv1alpha1.GPUDefaultForAllJobs
	GPUDefaultForAcceleratorJobs = configv1alpha1.GPUDefaultForAcceleratorJobs
	DefaultPreStopTimeout        = configv1alpha1.DefaultPreStopTimeout
	DefaultTaskDPort             = configv1alpha1.DefaultTaskDPort
)
