package server

import (
	"log"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHandshakeFailureLogHoldsBackAndCounts: within the interval one line,
// then the next line says how many were held back; lines that are not a
// failed handshake are logged as errors, each; every failure is counted
// under the reason its text says.
func TestHandshakeFailureLogHoldsBackAndCounts(t *testing.T) {
	var out []string
	logger := funcr.New(func(prefix, args string) { out = append(out, prefix+" "+args) }, funcr.Options{})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_handshake_failures_total"}, []string{"reason"})
	w := newHTTPErrorLog(logger, failures)
	now := time.Unix(1000, 0)
	w.now = func() time.Time { return now }
	l := log.New(w, "", 0)

	for range 500 {
		l.Printf("http: TLS handshake error from 10.0.0.9:4242: read tcp 10.0.0.1:9443->10.0.0.9:4242: i/o timeout")
	}
	require.Len(t, out, 1, "one line for a flood within the interval")
	assert.Contains(t, out[0], `"reason"="timeout"`)
	assert.Contains(t, out[0], `"source"="10.0.0.9:4242"`)
	assert.Contains(t, out[0], `"notLoggedSinceLastLine"=0`)
	now = now.Add(handshakeLogEvery)
	l.Printf("http: TLS handshake error from [fd00::9]:4242: remote error: tls: bad certificate")
	require.Len(t, out, 2)
	assert.Contains(t, out[1], `"notLoggedSinceLastLine"=499`, "the next line counts what was held back")
	assert.Contains(t, out[1], `"source"="[fd00::9]:4242"`)
	assert.Contains(t, out[1], `"reason"="client-alert"`)

	l.Printf("http: Accept error: accept tcp: too many open files; retrying in 5ms")
	require.Len(t, out, 3, "other lines of the HTTP server are not held back")
	assert.Contains(t, out[2], "too many open files")

	for msg, reason := range map[string]string{
		"read tcp 10.0.0.1:9443->10.0.0.9:1: i/o timeout": "timeout",
		"EOF": "eof",
		"read tcp 10.0.0.1:9443->10.0.0.9:1: read: connection reset by peer":   "reset",
		"read tcp 10.0.0.1:9443->10.0.0.9:1: use of closed network connection": "closed",
		"context canceled": "closed",
		"client sent an HTTP request to an HTTPS server":           "not-tls",
		"tls: first record does not look like a TLS handshake":     "not-tls",
		"remote error: tls: unknown certificate authority":         "client-alert",
		"tls: client offered only unsupported versions: [302 301]": "other",
	} {
		assert.Equal(t, reason, handshakeFailureReason(msg), msg)
	}
	assert.Equal(t, float64(500), testutil.ToFloat64(failures.WithLabelValues("timeout")))
	assert.Equal(t, float64(1), testutil.ToFloat64(failures.WithLabelValues("client-alert")))
	assert.Equal(t, len(handshakeFailureReasons), testutil.CollectAndCount(failures), "every reason has its series from the start")
}
