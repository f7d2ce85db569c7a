package policy

import "github.com/trainguard/trainguard/internal/contract"

// Forwarders for the packages another change is rewriting in parallel
// (internal/rescheduler, test/rescheduler, test/selfmanaged). They are the
// contract package's symbols under their old names; once those callers
// say contract.X, delete this file.
const (
	Prefix                               = contract.Prefix
	AnnotationInject                     = contract.AnnotationInject
	AnnotationInjected                   = contract.AnnotationInjected
	AnnotationRecoverStrategy            = contract.AnnotationRecoverStrategy
	AnnotationMaxReschedules             = contract.AnnotationMaxReschedules
	AnnotationMindClusterRecoverStrategy = contract.AnnotationMindClusterRecoverStrategy
	LabelManaged                         = contract.LabelManaged
	LabelMindClusterFaultScheduling      = contract.LabelMindClusterFaultScheduling
	InjectEnabled                        = contract.InjectEnabled
	InjectionAvoidNodes                  = contract.InjectionAvoidNodes
)

// HasStrategy forwards to contract.HasStrategy.
func HasStrategy(list, s string) bool { return contract.HasStrategy(list, s) }

// ParseRecoverStrategy forwards to contract.ParseRecoverStrategy.
func ParseRecoverStrategy(v string) (string, error) { return contract.ParseRecoverStrategy(v) }

// ParseFaultScheduling forwards to contract.ParseFaultScheduling.
func ParseFaultScheduling(v string) (string, error) { return contract.ParseFaultScheduling(v) }
