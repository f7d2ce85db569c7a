package outcome

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/promreg"
)

// Metric names, documented in docs/observability.md and used by the chart's
// alerts and dashboard (test/observability fails when one goes missing).
const (
	MetricTotal    = "trainguard_checkpoint_total"
	MetricDuration = "trainguard_checkpoint_duration_seconds"
	MetricBytes    = "trainguard_checkpoint_bytes"
	MetricInvalid  = "trainguard_checkpoint_outcome_invalid_total"
)

// metrics are created per Setup and registered on the registry passed in,
// never in init().
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	bytes    prometheus.Histogram
	invalid  prometheus.Counter
}

// labels of the checkpoint count and duration. namespace is the pod's: only
// namespaces an admin opted in ever report, so it is bounded by them.
var labels = []string{"outcome", "cause", "namespace"}

func newMetrics() *metrics {
	return &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricTotal,
			Help: "PreStop checkpoints of managed training pods, by outcome (saved, timeout, no-trainer, failed), " +
				"cause (preemption, eviction, node-lost, suspension, deletion, unknown) and the pod's namespace (opted-in namespaces only).",
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricDuration,
			Help: "Time from the preStop hook's checkpoint request to its outcome, by outcome, cause and namespace.",
			// A checkpoint takes seconds to minutes; the default preStop
			// timeout is 60s and nobody runs one past 10 minutes.
			Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600},
		}, labels),
		bytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricBytes,
			Help: "Size of the checkpoints saved by preStop hooks, in bytes.",
			// 1 MiB to 1 TiB, by factors of 4.
			Buckets: prometheus.ExponentialBuckets(1<<20, 4, 11),
		}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricInvalid,
			Help: "Termination messages with a trainguard.io/checkpoint line that could not be decoded (ignored).",
		}),
	}
}

// register adds the collectors to reg, reusing ones already registered (a
// second manager in the same process, as in tests). Series are created at
// zero per namespace, by initNamespace.
func (m *metrics) register(reg prometheus.Registerer) error {
	var errs []error
	m.total = promreg.Collect(reg, m.total, &errs)
	m.duration = promreg.Collect(reg, m.duration, &errs)
	m.bytes = promreg.Collect(reg, m.bytes, &errs)
	m.invalid = promreg.Collect(reg, m.invalid, &errs)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering checkpoint outcome metrics: %w", err)
	}
	return nil
}

// initNamespace creates every outcome and cause's count at zero in
// namespace, when its first managed pod appears: the first checkpoint there
// is then an increase from 0 (rate and increase miss a series' first
// sample), and panels show 0, not "no data". Durations are histograms (14
// series each) and are created by their first observation.
func (m *metrics) initNamespace(namespace string) {
	for _, o := range contract.CheckpointOutcomes() {
		for _, c := range Causes() {
			m.total.WithLabelValues(o, c, namespace)
		}
	}
}

func (m *metrics) observe(o contract.CheckpointOutcome, cause, namespace string) {
	m.total.WithLabelValues(o.Outcome, cause, namespace).Inc()
	m.duration.WithLabelValues(o.Outcome, cause, namespace).Observe(o.Seconds)
	if o.Outcome == contract.OutcomeSaved {
		m.bytes.Observe(float64(o.Bytes))
	}
}
