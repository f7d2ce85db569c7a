package server

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// apiServerPool is one of the API server's webhook transports: client-go
// keeps one per CA bundle (its TLS transport cache is keyed by the CA
// data), with up to 25 idle keep-alives, each closed after 90 s idle.
func apiServerPool() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // throwaway cert
		MaxIdleConnsPerHost: 25, IdleConnTimeout: 90 * time.Second,
	}}
}

// gate holds every request it serves until n are in at once, it is
// released, or 5 s passed, so n concurrent requests take n connections.
type gate struct {
	mu      sync.Mutex
	n       int
	arrived int
	all     chan struct{}
}

// open makes the gate hold the next n requests.
func (g *gate) open(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n, g.arrived, g.all = n, 0, make(chan struct{})
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseLocked()
}

func (g *gate) releaseLocked() {
	select {
	case <-g.all:
	default:
		close(g.all)
	}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	g.mu.Lock()
	g.arrived++
	if g.arrived == g.n {
		g.releaseLocked()
	}
	all := g.all
	g.mu.Unlock()
	select {
	case <-all:
	case <-time.After(5 * time.Second):
	}
	_, _ = w.Write([]byte("{}"))
}

// concurrently posts n requests through client at once and returns the
// errors (a status other than 200 is one).
func concurrently(client *http.Client, url string, n int) []error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := client.Post(url, "application/json", bytes.NewReader([]byte("{}")))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = &statusError{resp.StatusCode}
				}
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// fromSource counts the open connections from src, and the idle ones.
func fromSource(l *limitListener, src string) (open, idle int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if c.source == src {
			open++
			if !c.idleSince.IsZero() {
				idle++
			}
		}
	}
	return open, idle
}

// TestRotationsNewPoolIsServedWhileTheOldPoolIdles: a certificate rotation
// changes the CA bundle, and the API server's webhook client then dials a
// new pool of connections while the old pool's keep-alives stay open,
// idle, for its 90 s idle timeout. Both come from one address. Before the
// fix the address's share (here 8) was spent by the old pool's idle
// connections, and the new pool's connections past it were closed before
// their handshake: the reviews they carried failed with EOF (CI saw 6 of
// 1,558 fail in test/selfmanaged's forced rotations). Now the source's
// idle connections give their place; one whose connections are all busy
// still gets no more than its share.
func TestRotationsNewPoolIsServedWhileTheOldPoolIdles(t *testing.T) {
	const share, oldIdle = 8, 6
	g := &gate{}
	srv, url, stop := startServerWithHandlers(t, WebhookServerOptions{MaxConnectionsPerSource: share, Log: logr.Discard()},
		t.TempDir(), map[string]http.Handler{"/hold": g})
	defer stop()
	ws := srv.(*webhookServer)
	ws.mu.Lock()
	ln := ws.ln
	ws.mu.Unlock()
	src := "127.0.0.1"

	// The pool of the old bundle: oldIdle reviews at once leave oldIdle
	// keep-alives, idle once the server has answered.
	before := apiServerPool()
	defer before.CloseIdleConnections()
	g.open(oldIdle)
	require.Empty(t, concurrently(before, url+"/hold", oldIdle))
	require.Eventually(t, func() bool { _, idle := fromSource(ln, src); return idle == oldIdle }, 5*time.Second, 5*time.Millisecond,
		"the old pool's connections are idle keep-alives")

	// The pool of the new bundle: a full share of reviews at once.
	after := apiServerPool()
	defer after.CloseIdleConnections()
	g.open(share)
	errs := concurrently(after, url+"/hold", share)
	require.Empty(t, errs, "every review of the new pool is served while the old pool idles")
	require.Eventually(t, func() bool { open, _ := fromSource(ln, src); return open <= share }, 5*time.Second, 5*time.Millisecond,
		"the source still holds at most its share")

	// With the share busy, one more connection from the address is
	// closed before its handshake: the source has nothing idle to give.
	g.open(share + 1)
	done := make(chan []error, 1)
	go func() { done <- concurrently(after, url+"/hold", share) }()
	require.Eventually(t, func() bool { return ln.inFlight() == share }, 5*time.Second, 5*time.Millisecond)
	extra := dialFrom(strings.TrimPrefix(url, "https://"), src)
	if extra != nil {
		_ = extra.Close()
	}
	g.release()
	assert.Empty(t, <-done)
	assert.Nil(t, extra, "a source whose connections are all busy gets no more than its share")
}
