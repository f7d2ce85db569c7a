package webhook

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/trainguard/trainguard/internal/foundations/promreg"
	admissionv1 "k8s.io/api/admission/v1"
)

// admissionMetrics counts decisions and times them per endpoint.
type admissionMetrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

// newAdmissionMetrics registers the collectors, reusing ones already
// registered (several managers may share a process in tests).
func newAdmissionMetrics(reg prometheus.Registerer) (*admissionMetrics, error) {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainguard_admission_decisions_total",
		Help: "Admission decisions by webhook and decision (patched, allowed, denied, errored).",
	}, []string{"webhook", "decision"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trainguard_admission_duration_seconds",
		Help:    "Time spent answering an admission request, by webhook.",
		Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1},
	}, []string{"webhook"})
	var err error
	if decisions, err = promreg.Register(reg, decisions); err != nil {
		return nil, fmt.Errorf("registering admission metrics: %w", err)
	}
	if latency, err = promreg.Register(reg, latency); err != nil {
		return nil, fmt.Errorf("registering admission metrics: %w", err)
	}
	return &admissionMetrics{decisions: decisions, latency: latency}, nil
}

func (m *admissionMetrics) instrument(name string, admit admitFunc) admitFunc {
	if m == nil {
		return admit
	}
	return func(r *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		start := time.Now()
		resp := admit(r, req)
		m.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
		m.decisions.WithLabelValues(name, decision(resp)).Inc()
		return resp
	}
}

func decision(resp *admissionv1.AdmissionResponse) string {
	switch {
	case resp.Allowed && len(resp.Patch) > 0:
		return "patched"
	case resp.Allowed:
		return "allowed"
	case resp.Result != nil && resp.Result.Code >= 500:
		return "errored"
	}
	return "denied"
}
