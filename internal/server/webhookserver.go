package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Defaults of the webhook server's limits. The API server gives a webhook at
// most 30 s (timeoutSeconds) and the chart sets 5 s: nothing legitimate
// holds a connection longer than that, and an idle keep-alive connection is
// reused by the API server within seconds or never.
const (
	DefaultReadTimeout = 10 * time.Second
	// DefaultHandshakeTimeout bounds a connection's TLS handshake from its
	// acceptance. The API server's handshake takes milliseconds; a peer
	// that opens a connection and sends no ClientHello holds its place
	// under the connection cap until then (near the cap it gives its place
	// sooner, see limitListener). It was the header timeout (net/http's
	// default for the handshake), 5 s, as long as the API server waits for
	// the whole review.
	DefaultHandshakeTimeout = 3 * time.Second
	// DefaultReadHeaderTimeout bounds a request's headers from their first
	// byte, which the API server sends at once: a client trickling them
	// (slowloris) loses its connection after 5 s. The wait for a
	// connection's first request is the idle timeout's
	// (limitedConn.SetReadDeadline).
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultBodyReadTimeout bounds a body once its headers are in. The API
	// server writes a 7 MiB review in well under a second; a client that
	// declares a body and withholds it is cut off here, holding no slot
	// and no byte budget meanwhile (see Limiter).
	DefaultBodyReadTimeout = 2 * time.Second
	DefaultWriteTimeout    = 15 * time.Second
	// DefaultIdleTimeout outlasts the API server's own, so the API server
	// is the side that closes an idle keep-alive connection. Its webhook
	// client keeps one for 90 s (client-go's transport takes
	// http.DefaultTransport's IdleConnTimeout) and reuses it for the next
	// review; a server that closes first races that reuse: the review is
	// written into a connection being closed, the API server gets "broken
	// pipe" or a reset, does not retry the POST, and a fail-closed webhook
	// refuses the object (make scale's bursts met such refusals at 30 s).
	// A connection the API server dialled but has not used yet is parked
	// in the same pool and waits for its first request as long
	// (limitedConn.SetReadDeadline). Idle connections cost little: the API
	// server keeps at most 25 per host, they stay under the caps below, and
	// near the cap they give their place first.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConnections caps open connections (see limitListener):
	// about 25 MiB of connection state at most, and far more connections
	// than the API server opens (one per review in flight, HTTP/1.1).
	DefaultMaxConnections = 1024
	// DefaultMaxConnectionsPerSource is one source address's share of the
	// cap: an eighth, so no single pod can hold it
	// (TestOnePeerCannotHoldTheConnectionCap). The
	// API server opens one connection per review in flight and keeps a few
	// idle ones (client-go: at most 25 per host and pool); the limiter
	// handles 64 reviews at once and refuses more within 3 s, so 128 from
	// one address is more than the API server ever needs in use. After a
	// CA bundle change it also keeps the old pool's idle connections for
	// 90 s; those give their place to its new ones (limitListener.admit)
	// instead of counting against them. Raise it only where many API
	// servers reach trainguard through one address (an SNAT, a
	// konnectivity agent) under very heavy admission load.
	DefaultMaxConnectionsPerSource = 128
	// DefaultMaxConcurrent is how many reviews are handled at once. 64 is far
	// above what one replica sees at hundreds of pods per second (a review
	// takes well under a millisecond of CPU), and low enough that a flood of
	// small reviews cannot pile up goroutines and buffers without bound.
	DefaultMaxConcurrent = 64
	// DefaultMaxInFlightBytes bounds the request bodies being decoded at
	// once. Decoding costs about 5x the body in heap; 16 MiB admits two
	// reviews of the maximum size (7 MiB, see webhook.MaxRequestBytes) at a
	// time, about 80 MiB of heap, under half the chart's 256 MiB limit.
	// Bodies still arriving have a budget of half that (at 1x their size).
	DefaultMaxInFlightBytes = 16 << 20
	// DefaultQueueWait is how long a review waits for a slot before it is
	// answered 429: below the chart's 5 s admission timeout, so the API
	// server sees a clear "too many requests" instead of its own timeout.
	DefaultQueueWait = 3 * time.Second
	maxHeaderBytes   = 64 << 10
)

// WebhookServerOptions configure the hardened webhook server.
type WebhookServerOptions struct {
	Host    string
	Port    int
	CertDir string
	// Read, header, write and idle timeouts of every connection; zero means the default.
	ReadTimeout, ReadHeaderTimeout, WriteTimeout, IdleTimeout time.Duration
	// HandshakeTimeout bounds a connection's TLS handshake from its
	// acceptance; zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxConnections open at once; zero means DefaultMaxConnections.
	MaxConnections int
	// MaxConnectionsPerSource open at once from one address; zero means
	// DefaultMaxConnectionsPerSource (at most MaxConnections).
	MaxConnectionsPerSource int
	Limits                  LimiterOptions
	TLSOpts                 []func(*tls.Config)
	Log                     logr.Logger
}

// webhookServer is controller-runtime's webhook.Server with the limits its
// DefaultServer lacks: header/body/read/write/idle timeouts (it sets only a
// 32 s header timeout, so a client trickling a 7 MiB body holds a goroutine
// and its buffer for ever), a cap on open connections, and admission
// control in front of every endpoint, so a burst of large reviews is queued
// or refused instead of exhausting memory.
type webhookServer struct {
	opts      WebhookServerOptions
	mux       *http.ServeMux
	limiter   *Limiter
	conns     prometheus.Counter
	openConns prometheus.Gauge
	refused   *prometheus.CounterVec
	// errorLog takes net/http's own log lines (failed handshakes).
	errorLog *httpErrorLog
	// paths are the webhook paths registered; any other request is
	// answered with Connection: close.
	paths   map[string]bool
	mu      sync.Mutex
	started bool
	// serving is true while the accept loop runs; tlsConfig and ln are
	// set before it starts.
	serving   bool
	tlsConfig *tls.Config
	ln        *limitListener
}

var _ ctrlwebhook.Server = (*webhookServer)(nil)

// NewWebhookServer builds the server; it listens when the manager starts it.
func NewWebhookServer(o WebhookServerOptions) ctrlwebhook.Server {
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = min(DefaultReadHeaderTimeout, o.ReadTimeout)
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxConnectionsPerSource <= 0 {
		o.MaxConnectionsPerSource = DefaultMaxConnectionsPerSource
	}
	o.MaxConnectionsPerSource = min(o.MaxConnectionsPerSource, o.MaxConnections)
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	// A body gets no longer than the whole request may take.
	if o.Limits.BodyReadTimeout <= 0 {
		o.Limits.BodyReadTimeout = DefaultBodyReadTimeout
	}
	o.Limits.BodyReadTimeout = min(o.Limits.BodyReadTimeout, o.ReadTimeout)
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Port == 0 {
		o.Port = ctrlwebhook.DefaultPort
	}
	handshakeFailures := registerOnce(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainguard_webhook_tls_handshake_failures_total",
		Help: "TLS handshakes the webhook server failed, by reason: timeout (no ClientHello within --webhook-handshake-timeout), eof or reset " +
			"(the client gave up), closed (trainguard closed it to make room near the connection cap, or was stopping), not-tls (plain HTTP " +
			"or another protocol), client-alert (the client refused the handshake, e.g. a CA bundle that does not hold the serving certificate's CA), other.",
	}, []string{"reason"}))
	return &webhookServer{opts: o, mux: http.NewServeMux(), limiter: NewLimiter(o.Limits, o.Log), paths: map[string]bool{},
		errorLog: newHTTPErrorLog(o.Log, handshakeFailures),
		refused: registerOnce(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trainguard_webhook_connections_closed_early_total",
			Help: "Webhook connections closed by trainguard before their peer was done, by reason: per-source (a new connection from an address " +
				"already holding --webhook-max-connections-per-source, none of them idle), idle-per-source (that address's longest-idle keep-alive, " +
				"closed to make room for its new connection), idle-near-cap (an idle or unused connection closed for a new one past 3/4 of the cap) " +
				"or handshake-near-cap (a connection still in its TLS handshake closed for a new one past 3/4 of the cap).",
		}, []string{"reason"})),
		conns: registerOnce(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trainguard_webhook_connections_total",
			Help: "TLS connections accepted by the webhook server. Growing with requests means callers are not reusing connections (each costs a handshake).",
		})),
		openConns: registerOnce(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trainguard_webhook_open_connections",
			Help: "Connections open to the webhook server; at --webhook-max-connections new ones wait to be accepted.",
		}))}
}

// NeedLeaderElection is false: every replica answers admission requests.
func (s *webhookServer) NeedLeaderElection() bool { return false }

// Register serves hook at path behind the limiter.
func (s *webhookServer) Register(path string, hook http.Handler) {
	s.mux.Handle(path, s.limiter.Wrap(hook))
	s.mu.Lock()
	s.paths[path] = true
	s.mu.Unlock()
	s.opts.Log.Info("registering webhook", "path", path)
}

// WebhookMux is the mux the endpoints are registered on.
func (s *webhookServer) WebhookMux() *http.ServeMux { return s.mux }

// Start serves TLS until ctx ends, reloading the certificate when its files change.
func (s *webhookServer) Start(ctx context.Context) error {
	cfg := &tls.Config{NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	for _, op := range s.opts.TLSOpts {
		op(cfg)
	}
	if cfg.GetCertificate == nil {
		w, err := certwatcher.New(filepath.Join(s.opts.CertDir, "tls.crt"), filepath.Join(s.opts.CertDir, "tls.key"))
		if err != nil {
			return fmt.Errorf("loading the webhook serving certificate from %s: %w", s.opts.CertDir, err)
		}
		cfg.GetCertificate = w.GetCertificate
		go func() {
			if err := w.Start(ctx); err != nil {
				s.opts.Log.Error(err, "certificate watcher stopped")
			}
		}()
	}
	tcp, err := net.Listen("tcp", net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port)))
	if err != nil {
		return fmt.Errorf("listening for webhooks: %w", err)
	}
	limited := newLimitListener(tcp, s.opts.MaxConnections, s.opts.MaxConnectionsPerSource, s.opts.HandshakeTimeout, s.opts.IdleTimeout,
		s.openConns, s.refused, s.opts.Log)
	ln := tls.NewListener(limited, cfg)
	s.mu.Lock()
	s.ln, s.tlsConfig = limited, cfg
	s.mu.Unlock()
	srv := s.httpServer(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			s.opts.Log.Error(err, "shutting down the webhook server")
		}
	}()
	s.setServing(true)
	s.opts.Log.Info("serving webhooks", "address", ln.Addr().String(), "handshakeTimeout", s.opts.HandshakeTimeout, "readTimeout", s.opts.ReadTimeout,
		"readHeaderTimeout", s.opts.ReadHeaderTimeout, "bodyReadTimeout", s.limiter.bodyTimeout, "writeTimeout", s.opts.WriteTimeout,
		"idleTimeout", s.opts.IdleTimeout, "maxConnections", s.opts.MaxConnections, "maxConnectionsPerSource", s.opts.MaxConnectionsPerSource,
		"maxConcurrent", s.limiter.maxConcurrent, "maxInFlightBytes", s.limiter.maxBytes)
	err = srv.Serve(ln)
	s.setServing(false)
	if err != nil && err != http.ErrServerClosed {
		return err
	}
	<-done
	return nil
}

func (s *webhookServer) setServing(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = s.started || on
	s.serving = on
}

// handler serves the mux, closing the connection after any request that
// is not a review (a POST to a registered webhook path): keep-alive is for
// the API server, and a peer probing other paths must not keep its place
// under the cap with one cheap request now and then. Near the cap every
// answer closes its connection.
func (s *webhookServer) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		review := r.Method == http.MethodPost && s.paths[r.URL.Path]
		ln := s.ln
		s.mu.Unlock()
		if !review || (ln != nil && ln.nearCap()) {
			w.Header().Set("Connection", "close")
		}
		s.mux.ServeHTTP(w, r)
	})
}

func (s *webhookServer) httpServer(ctx context.Context) *http.Server {
	return &http.Server{
		Handler:           s.handler(),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState: func(c net.Conn, state http.ConnState) {
			if state == http.StateNew {
				s.conns.Inc()
			}
			s.ln.connState(c, state)
		},
		// Not nil: net/http would write every failed handshake to the
		// standard logger (httpErrorLog says why that matters).
		ErrorLog: log.New(s.errorLog, "", 0),
		// HTTP/2 stays off even if TLSOpts re-enable h2 in NextProtos.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
}

// StartedChecker reports ready while the server accepts connections and
// its TLS configuration completes a handshake. The handshake runs in
// memory, not over the port: a check that dialled the port competed for a
// place under the connection cap, so a peer holding the cap also took the
// replica out of its Service (TestReadinessDoesNotCompeteForTheCap).
func (s *webhookServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		s.mu.Lock()
		started, serving, cfg := s.started, s.serving, s.tlsConfig
		s.mu.Unlock()
		if !started {
			return fmt.Errorf("webhook server has not started yet")
		}
		if !serving {
			return fmt.Errorf("webhook server stopped accepting connections")
		}
		return handshakeInMemory(cfg)
	}
}

// handshakeInMemory completes a TLS handshake with cfg over a pipe: the
// serving certificate loads and the configuration is usable.
func handshakeInMemory(cfg *tls.Config) error {
	client, server := net.Pipe()
	defer func() { _ = client.Close(); _ = server.Close() }()
	deadline := time.Now().Add(5 * time.Second)
	_ = client.SetDeadline(deadline)
	_ = server.SetDeadline(deadline)
	done := make(chan error, 1)
	go func() { done <- tls.Server(server, cfg).Handshake() }()
	cerr := tls.Client(client, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}).Handshake() // only checks that TLS is served
	_ = client.Close()
	serr := <-done
	if cerr != nil || serr != nil {
		return fmt.Errorf("webhook server cannot complete a TLS handshake: %w", errors.Join(serr, cerr))
	}
	return nil
}
