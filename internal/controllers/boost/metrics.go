package boost

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainguard/trainguard/internal/foundations/promreg"
)

// Metric names (docs/observability.md, the chart's dashboard).
const (
	MetricSecondsAtRisk = "trainguard_work_at_risk_seconds"
	MetricStepsAtRisk   = "trainguard_work_at_risk_steps"
	MetricFits          = "trainguard_termination_checkpoint_fits"
	MetricBoost         = "trainguard_priority_boost"
	MetricDropped       = "trainguard_work_at_risk_series_dropped_total"
)

// MaxJobs bounds the per-job series: one set per admitted training
// Workload in an injected namespace, at most this many at a time.
const MaxJobs = 2000

// Metrics are the per-job work-at-risk gauges. A job's series go when its
// Workload is no longer admitted, so their number follows the admitted
// jobs, and never exceeds MaxJobs.
type Metrics struct {
	seconds, steps, fits, boostG *prometheus.GaugeVec
	dropped                      prometheus.Counter

	mu   sync.Mutex
	jobs map[[2]string]string // (namespace, workload) -> job label
}

// NewMetrics registers the gauges on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	labels := []string{"namespace", "job"}
	m := &Metrics{
		seconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricSecondsAtRisk,
			Help: "Seconds since the job's last committed checkpoint, for admitted training jobs whose trainer reports it " +
				"(absent: unknown, no listening trainer)."}, labels),
		steps: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricStepsAtRisk,
			Help: "Training steps since the job's last committed checkpoint."}, labels),
		fits: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricFits,
			Help: "1 when a termination checkpoint is expected within the pods' grace period (a trainer listens and its last save took at most half of it), else 0."}, labels),
		boostG: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBoost,
			Help: "The kueue.x-k8s.io/priority-boost trainguard wants on the job's Workload (written only with priorityBoost.enabled)."}, labels),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricDropped,
			Help: "Work-at-risk observations not exported because MaxJobs series exist already."}),
		jobs: map[[2]string]string{},
	}
	for _, c := range []prometheus.Collector{m.seconds, m.steps, m.fits, m.boostG, m.dropped} {
		if _, err := promreg.Register(reg, c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// admit returns the job label of a Workload's series, false when MaxJobs
// series exist already.
func (m *Metrics) admit(ns, wl, job string) (string, bool) {
	key := [2]string{ns, wl}
	if j, ok := m.jobs[key]; ok {
		return j, true
	}
	if len(m.jobs) >= MaxJobs {
		m.dropped.Inc()
		return "", false
	}
	m.jobs[key] = job
	return job, true
}

func (m *Metrics) observe(ns, wl, job string, r Risk) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	job, ok := m.admit(ns, wl, job)
	if !ok {
		return
	}
	if r.Known && r.HasCommit {
		m.seconds.WithLabelValues(ns, job).Set(r.SecondsSinceCommit)
		m.steps.WithLabelValues(ns, job).Set(float64(r.StepsSinceCommit))
	} else {
		m.seconds.DeleteLabelValues(ns, job)
		m.steps.DeleteLabelValues(ns, job)
	}
	fits := 0.0
	if r.CheckpointFits() {
		fits = 1
	}
	m.fits.WithLabelValues(ns, job).Set(fits)
}

func (m *Metrics) boost(ns, wl string, b int32) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if job, ok := m.jobs[[2]string{ns, wl}]; ok {
		m.boostG.WithLabelValues(ns, job).Set(float64(b))
	}
}

func (m *Metrics) forget(ns, wl string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := [2]string{ns, wl}
	job, ok := m.jobs[key]
	if !ok {
		return
	}
	delete(m.jobs, key)
	for _, g := range []*prometheus.GaugeVec{m.seconds, m.steps, m.fits, m.boostG} {
		g.DeleteLabelValues(ns, job)
	}
}
