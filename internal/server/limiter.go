package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainguard/trainguard/internal/promreg"
	"github.com/trainguard/trainguard/webhook"
)

// LimiterOptions bound the work in flight; zero values mean the defaults.
type LimiterOptions struct {
	// MaxConcurrent reviews handled at once.
	MaxConcurrent int
	// MaxInFlightBytes of request bodies handled at once, counted by
	// Content-Length (a body without one counts as the maximum size).
	MaxInFlightBytes int64
	// QueueWait is how long a review waits for room before a 429.
	QueueWait time.Duration
}

// Limiter admits a review only when both a slot and room for its body are
// free, waiting up to QueueWait; beyond that it answers 429 Too Many
// Requests with Retry-After, which the API server retries or, once its own
// timeout passes, treats per the webhook's failurePolicy. Bytes are the
// bound that matters for memory: a 7 MiB review costs about 5x its size in
// heap while decoded, so 32 of them at once would need more than 1 GiB.
type Limiter struct {
	maxConcurrent int
	maxBytes      int64
	wait          time.Duration
	slots, bytes  *semaphore.Weighted
	inFlight      prometheus.Gauge
	rejected      prometheus.Counter
	latency       *prometheus.HistogramVec
	log           logr.Logger
}

// NewLimiter builds a limiter, registering its metrics once per process.
func NewLimiter(o LimiterOptions, log logr.Logger) *Limiter {
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	// One review of the largest legal size must always fit, or it could never run.
	if o.MaxInFlightBytes < webhook.MaxRequestBytes {
		o.MaxInFlightBytes = webhook.MaxRequestBytes
	}
	if o.QueueWait <= 0 {
		o.QueueWait = DefaultQueueWait
	}
	return &Limiter{
		maxConcurrent: o.MaxConcurrent, maxBytes: o.MaxInFlightBytes, wait: o.QueueWait,
		slots: semaphore.NewWeighted(int64(o.MaxConcurrent)), bytes: semaphore.NewWeighted(o.MaxInFlightBytes),
		inFlight: registerOnce(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trainguard_webhook_inflight_requests",
			Help: "Admission reviews being handled now (past the concurrency limiter).",
		})),
		rejected: registerOnce(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trainguard_webhook_rejected_total",
			Help: "Admission reviews answered 429 because the concurrency or in-flight byte limit stayed full for the queue wait.",
		})),
		latency: registerOnce(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "trainguard_webhook_request_duration_seconds",
			Help: "Time from a review's headers to its answer, queueing, body read, decode and encode included, by path " +
				"(trainguard_admission_duration_seconds times the decision alone).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 3},
		}, []string{"path"})),
		log: log,
	}
}

// registerOnce registers c in controller-runtime's registry, or returns the
// collector already registered under its name (tests run several servers).
// Best effort: a server without its metrics still serves.
func registerOnce[C prometheus.Collector](c C) C {
	c, _ = promreg.Register(metrics.Registry, c)
	return c
}

// weight is what a request counts against the byte budget. A body larger
// than the cap is refused by the handler from its Content-Length before it
// is read, so it takes a slot but no bytes; an unknown length may be up to the cap.
func weight(r *http.Request) int64 {
	switch {
	case r.ContentLength > webhook.MaxRequestBytes:
		return 0
	case r.ContentLength > 0:
		return r.ContentLength
	}
	return webhook.MaxRequestBytes
}

// Wrap puts next behind the limiter.
func (l *Limiter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { l.latency.WithLabelValues(r.URL.Path).Observe(time.Since(start).Seconds()) }()
		release, ok := l.acquire(r.Context(), weight(r))
		if !ok {
			l.rejected.Inc()
			l.log.Info("refused admission review: limit reached", "path", r.URL.Path, "remote", r.RemoteAddr,
				"contentLength", r.ContentLength, "maxConcurrent", l.maxConcurrent, "maxInFlightBytes", l.maxBytes)
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("trainguard webhook is busy: %d reviews or %d bytes of reviews already in flight for %s; "+
				"retry, or raise --max-concurrent-reviews/--max-inflight-request-bytes or the replica count",
				l.maxConcurrent, l.maxBytes, l.wait), http.StatusTooManyRequests)
			return
		}
		defer release()
		l.inFlight.Inc()
		defer l.inFlight.Dec()
		next.ServeHTTP(w, r)
	})
}

// acquire takes a slot and n bytes, waiting at most the queue wait.
func (l *Limiter) acquire(ctx context.Context, n int64) (func(), bool) {
	ctx, cancel := context.WithTimeout(ctx, l.wait)
	defer cancel()
	if err := l.slots.Acquire(ctx, 1); err != nil {
		return nil, false
	}
	if err := l.bytes.Acquire(ctx, n); err != nil {
		l.slots.Release(1)
		return nil, false
	}
	return func() { l.bytes.Release(n); l.slots.Release(1) }, true
}
