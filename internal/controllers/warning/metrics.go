package warning

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainguard/trainguard/internal/foundations/promreg"
)

// Metric names, documented in docs/node-warnings.md.
const (
	metricRequests     = "trainguard_node_warning_requests_total"
	metricSkipped      = "trainguard_node_warning_jobs_skipped_total"
	metricBrakeEngaged = "trainguard_node_warning_brake_engaged"
)

// Outcomes of a request (the requests metric's label).
const (
	OutcomeCommitted   = "committed"
	OutcomeTimeout     = "timeout"
	OutcomeUnanswered  = "unanswered"
	OutcomeRateLimited = "rate_limited"
)

type metrics struct {
	requests     *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	brakeEngaged prometheus.Gauge
}

// newMetrics creates the collectors and registers them on reg (one already
// registered under the name is reused).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var errs []error
	m := &metrics{
		requests: promreg.Collect(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricRequests,
			Help: "Checkpoint-now requests sent to jobs with a rank on a warning node, by outcome (committed, timeout: acknowledged but not committed within nodeWarnings.commitTimeout, unanswered: no pod of the job answered, rate_limited: the trainer refused).",
		}, []string{"outcome"}), &errs),
		skipped: promreg.Collect(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricSkipped,
			Help: "Jobs with a rank on a warning node that were not asked, by reason (interval: asked within nodeWarnings.minInterval; brake: too many nodes warn at once).",
		}, []string{"reason"}), &errs),
		brakeEngaged: promreg.Collect(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricBrakeEngaged,
			Help: "1 while the node-warning brake holds every request (more than nodeWarnings.brakeThreshold of the nodes carrying managed pods warn).",
		}), &errs),
	}
	for _, o := range []string{OutcomeCommitted, OutcomeTimeout, OutcomeUnanswered, OutcomeRateLimited} {
		m.requests.WithLabelValues(o)
	}
	for _, r := range []string{SkipInterval, SkipBrake} {
		m.skipped.WithLabelValues(r)
	}
	return m, errors.Join(errs...)
}
