package server

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// handshakeLogEvery is how often at most a failed TLS handshake is logged;
// the lines held back in between are counted in the next one, and every
// failure in trainguard_webhook_tls_handshake_failures_total.
const handshakeLogEvery = 10 * time.Second

// handshakeFailurePrefix starts net/http's line for a failed TLS handshake
// (net/http's server.go, conn.serve).
const handshakeFailurePrefix = "http: TLS handshake error from "

// handshakeFailureReasons are the values of the metric's reason label.
var handshakeFailureReasons = []string{"timeout", "eof", "reset", "closed", "not-tls", "client-alert", "other"}

// httpErrorLog is the webhook server's http.Server.ErrorLog. net/http
// writes one line per failed TLS handshake, and a nil ErrorLog is not
// silence but the process's standard logger: peers that open connections
// and never send a ClientHello, and the connections trainguard closes to
// make room near the cap, wrote 16,396 lines in a minute, which buried
// everything else and cost the log pipeline. So a failed handshake is
// counted by reason and logged at most once per handshakeLogEvery, with
// the number held back since the line before; any other line (an accept
// error, a handler's panic) is logged as an error, through the same
// logger as the rest of trainguard.
type httpErrorLog struct {
	log      logr.Logger
	failures *prometheus.CounterVec
	now      func() time.Time
	mu       sync.Mutex
	last     time.Time
	held     int
}

func newHTTPErrorLog(log logr.Logger, failures *prometheus.CounterVec) *httpErrorLog {
	for _, r := range handshakeFailureReasons {
		failures.WithLabelValues(r) // every reason reads 0 before its first failure
	}
	return &httpErrorLog{log: log, failures: failures, now: time.Now}
}

// Write takes one line of net/http's log.Logger.
func (w *httpErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	rest, ok := strings.CutPrefix(line, handshakeFailurePrefix)
	if !ok {
		w.log.Error(errors.New(line), "webhook HTTP server")
		return len(p), nil
	}
	// "<address>: <error>"; an address holds no ": " (IPv6 is bracketed).
	source, msg, _ := strings.Cut(rest, ": ")
	reason := handshakeFailureReason(msg)
	w.failures.WithLabelValues(reason).Inc()
	w.mu.Lock()
	now := w.now()
	if !w.last.IsZero() && now.Sub(w.last) < handshakeLogEvery {
		w.held++
		w.mu.Unlock()
		return len(p), nil
	}
	held := w.held
	w.last, w.held = now, 0
	w.mu.Unlock()
	w.log.Info("TLS handshake failed; further failures are logged at most once per interval, the metric counts them all",
		"source", source, "reason", reason, "error", msg, "notLoggedSinceLastLine", held,
		"interval", handshakeLogEvery, "metric", "trainguard_webhook_tls_handshake_failures_total")
	return len(p), nil
}

// handshakeFailureReason sorts net/http's error text into a few reasons,
// the label of the metric: which of them grows says who is failing.
func handshakeFailureReason(msg string) string {
	switch {
	case strings.Contains(msg, "i/o timeout"):
		return "timeout" // no ClientHello, or no end of it, within --webhook-handshake-timeout
	case strings.Contains(msg, "use of closed network connection"), strings.Contains(msg, "context canceled"):
		return "closed" // trainguard closed it: to make room near the cap, or shutting down
	case strings.Contains(msg, "client sent an HTTP request to an HTTPS server"),
		strings.Contains(msg, "first record does not look like a TLS handshake"),
		strings.Contains(msg, "unsupported SSLv2 handshake"):
		return "not-tls"
	case strings.Contains(msg, "remote error: tls:"):
		return "client-alert" // the client refused: the API server not trusting the serving certificate reads so
	case strings.Contains(msg, "connection reset by peer"), strings.Contains(msg, "broken pipe"):
		return "reset"
	case strings.HasSuffix(msg, "EOF"):
		return "eof" // the client closed before finishing its handshake
	default:
		return "other"
	}
}
