package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainguard/trainguard/internal/foundations/promreg"
	"github.com/trainguard/trainguard/webhook"
)

// LimiterOptions bound the work in flight; zero values mean the defaults.
type LimiterOptions struct {
	// MaxConcurrent reviews handled at once.
	MaxConcurrent int
	// MaxInFlightBytes of request bodies handled (decoded) at once, counted
	// by the bytes that actually arrived.
	MaxInFlightBytes int64
	// QueueWait is how long a review waits for room before a 429.
	QueueWait time.Duration
	// BodyReadTimeout bounds reading a review's body once its headers are in.
	BodyReadTimeout time.Duration
}

// Limiter admits a review only once its body has arrived, and then only
// when both a slot and room for that body are free, waiting up to
// QueueWait; beyond that it answers 429 Too Many Requests with Retry-After,
// which the API server retries or, once its own timeout passes, treats per
// the webhook's failurePolicy. Bytes are the bound that matters for memory:
// a 7 MiB review costs about 5x its size in heap while decoded, so 32 of
// them at once would need more than 1 GiB.
//
// Nothing is charged for what a client merely declares: a Content-Length
// is the client's word, and charging it before the body arrived let three
// connections that sent headers alone (7+7+2 MiB declared, renewed before
// the read timeout) hold the whole byte budget, and 64 of them every slot,
// so every real review got 429 (TestHeaderOnlyClientsDoNotLockOutAdmission).
// The body is read first, under BodyReadTimeout, into buffers allocated as
// bytes arrive and charged to a receiving budget of their own; a client
// that sends nothing costs a goroutine and a few KiB until the timeout cuts
// it off, and no slot.
type Limiter struct {
	maxConcurrent int
	maxBytes      int64
	wait          time.Duration
	bodyTimeout   time.Duration
	slots, bytes  *semaphore.Weighted
	// receiving bounds the buffers of bodies still arriving (1x their size;
	// decoding is what bytes bounds).
	receiving *receiveBudget
	inFlight  prometheus.Gauge
	arriving  prometheus.Gauge
	rejected  prometheus.Counter
	latency   *prometheus.HistogramVec
	log       logr.Logger
}

// NewLimiter builds a limiter, registering its metrics once per process.
func NewLimiter(o LimiterOptions, log logr.Logger) *Limiter {
	o = o.withDefaults()
	return &Limiter{
		maxConcurrent: o.MaxConcurrent, maxBytes: o.MaxInFlightBytes, wait: o.QueueWait, bodyTimeout: o.BodyReadTimeout,
		slots: semaphore.NewWeighted(int64(o.MaxConcurrent)), bytes: semaphore.NewWeighted(o.MaxInFlightBytes),
		receiving: newReceiveBudget(receivingBudget(o.MaxInFlightBytes)),
		inFlight: registerOnce(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trainguard_webhook_inflight_requests",
			Help: "Admission reviews being handled now (past the concurrency limiter).",
		})),
		arriving: registerOnce(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trainguard_webhook_receiving_requests",
			Help: "Admission reviews whose body is still arriving (they hold no slot yet).",
		})),
		rejected: registerOnce(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trainguard_webhook_rejected_total",
			Help: "Admission reviews answered 429 because the concurrency or in-flight byte limit stayed full for the queue wait.",
		})),
		latency: registerOnce(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "trainguard_webhook_request_duration_seconds",
			Help: "Time from a review's headers to its answer, body read, queueing, decode and encode included, by path " +
				"(trainguard_admission_duration_seconds times the decision alone).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 3},
		}, []string{"path"})),
		log: log,
	}
}

// receivingBudget is the room for bodies still arriving: half the decode
// budget (a body costs 1x while it arrives, about 5x while decoded), and
// never less than one body of the largest legal size, which must fit.
func receivingBudget(maxInFlight int64) int64 {
	return max(maxInFlight/2, webhook.MaxRequestBytes)
}

func (o LimiterOptions) withDefaults() LimiterOptions {
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
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	return o
}

// registerOnce registers c in controller-runtime's registry, or returns the
// collector already registered under its name (tests run several servers).
// Best effort: a server without its metrics still serves.
func registerOnce[C prometheus.Collector](c C) C {
	c, _ = promreg.Register(metrics.Registry, c)
	return c
}

// Wrap puts next behind the limiter: receive the body, then take a slot
// and room for what arrived, then hand next the body from memory.
func (l *Limiter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { l.latency.WithLabelValues(r.URL.Path).Observe(time.Since(start).Seconds()) }()
		// One wait for room, shared by receiving and handling.
		ctx, cancel := context.WithTimeout(r.Context(), l.wait)
		defer cancel()
		b, status, err := l.receiveBody(ctx, w, r)
		if err != nil {
			l.refuse(w, r, status, err)
			return
		}
		release, ok := l.acquire(ctx, b.n)
		l.receiving.release(b) // the body's bytes now count against the in-flight budget
		if !ok {
			l.refuse(w, r, http.StatusTooManyRequests, errBusy)
			return
		}
		defer release()
		l.inFlight.Inc()
		defer l.inFlight.Dec()
		if b.read {
			r.Body, r.ContentLength = &chunkReader{chunks: b.chunks}, b.n
		}
		next.ServeHTTP(w, r)
	})
}

// errBusy marks a review refused for lack of room.
var errBusy = errors.New("busy")

// refuse answers a review that is not handled: 429 when the limits stayed
// full, else the status of the body's failure (413, 408, 400).
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status != http.StatusTooManyRequests {
		l.log.Info("refused admission review: body not received", "path", r.URL.Path, "remote", r.RemoteAddr,
			"contentLength", r.ContentLength, "status", status, "error", err.Error())
		w.Header().Set("Connection", "close")
		http.Error(w, err.Error(), status)
		return
	}
	l.rejected.Inc()
	l.log.Info("refused admission review: limit reached", "path", r.URL.Path, "remote", r.RemoteAddr,
		"contentLength", r.ContentLength, "maxConcurrent", l.maxConcurrent, "maxInFlightBytes", l.maxBytes)
	w.Header().Set("Retry-After", "1")
	http.Error(w, fmt.Sprintf("trainguard webhook is busy: %d reviews or %d bytes of reviews already in flight for %s; "+
		"retry, or raise --max-concurrent-reviews/--max-inflight-request-bytes or the replica count",
		l.maxConcurrent, l.maxBytes, l.wait), http.StatusTooManyRequests)
}

// acquire takes a slot and n bytes, waiting until ctx ends.
func (l *Limiter) acquire(ctx context.Context, n int64) (func(), bool) {
	if err := l.slots.Acquire(ctx, 1); err != nil {
		return nil, false
	}
	if err := l.bytes.Acquire(ctx, n); err != nil {
		l.slots.Release(1)
		return nil, false
	}
	return func() { l.bytes.Release(n); l.slots.Release(1) }, true
}
