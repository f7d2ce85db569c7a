package rescheduler

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the rescheduler's Prometheus counters. They are created per
// Setup and registered on the registry passed in, never in init().
type metrics struct {
	decisions  *prometheus.CounterVec
	deletions  *prometheus.CounterVec
	badNodes   prometheus.Counter
	recreated  prometheus.Counter
	errorsByOp *prometheus.CounterVec
}

// Metric names, documented in docs/rescheduler.md.
const (
	metricDecisions = "trainguard_rescheduler_decisions_total"
	metricDeletions = "trainguard_rescheduler_pod_deletions_total"
	metricBadNodes  = "trainguard_rescheduler_bad_nodes_recorded_total"
	metricRecreated = "trainguard_rescheduler_bare_pods_recreated_total"
	metricErrors    = "trainguard_rescheduler_errors_total"
)

func newMetrics() *metrics {
	return &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricDecisions,
			Help: "Events the rescheduler emitted, by reason (NodeLost, GracefulDelete, PermanentFailure, ...).",
		}, []string{"reason"}),
		deletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricDeletions,
			Help: "Training pods the rescheduler deleted, by mode (graceful, force).",
		}, []string{"mode"}),
		badNodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricBadNodes,
			Help: "Nodes recorded as bad for a job.",
		}),
		recreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricRecreated,
			Help: "Bare pods the rescheduler recreated.",
		}),
		errorsByOp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricErrors,
			Help: "Failed API operations of the rescheduler, by operation.",
		}, []string{"operation"}),
	}
}

// register adds the counters to reg. When they are already registered (a
// second Setup in the same process, as in tests), the registered ones are
// reused, so counts keep adding up in one place.
func (m *metrics) register(reg prometheus.Registerer) error {
	var errs []error
	reuse := func(err error) { errs = append(errs, err) }
	m.decisions = registerOrReuse(reg, m.decisions, reuse)
	m.deletions = registerOrReuse(reg, m.deletions, reuse)
	m.badNodes = registerOrReuse(reg, m.badNodes, reuse)
	m.recreated = registerOrReuse(reg, m.recreated, reuse)
	m.errorsByOp = registerOrReuse(reg, m.errorsByOp, reuse)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering rescheduler metrics: %w", err)
	}
	return nil
}

func registerOrReuse[T prometheus.Collector](reg prometheus.Registerer, c T, fail func(error)) T {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing
		}
	}
	fail(err)
	return c
}
