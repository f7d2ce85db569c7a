package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/trainguard/trainguard/webhook"
)

// stallers hold TCP connections to addr that never send a ClientHello,
// perSource from each of sources loopback addresses (127.0.0.10 onwards),
// and, when redial is set, dial again as soon as the server closes one, as
// an attacker keeping its hold would. Stop closes them all.
type stallers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

func stall(t *testing.T, addr string, sources, perSource int, redial bool) *stallers {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stallers{cancel: cancel, conns: map[net.Conn]bool{}}
	dialed := make(chan error, sources*perSource)
	for src := range sources {
		d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", 10+src))}}
		for range perSource {
			s.wg.Go(func() {
				first := true
				for ctx.Err() == nil {
					c, err := d.DialContext(ctx, "tcp", addr)
					if first {
						dialed <- err
						first = false
					}
					if err != nil {
						return
					}
					if !s.track(c) {
						return
					}
					_, _ = c.Read(make([]byte, 1)) // returns when the server closes it
					s.untrack(c)
					if !redial {
						return
					}
				}
			})
		}
	}
	for range sources * perSource {
		require.NoError(t, <-dialed, "every stalled connection is established (accepted or in the backlog)")
	}
	return s
}

func (s *stallers) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		_ = c.Close()
		return false
	}
	s.conns[c] = true
	return true
}

func (s *stallers) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	_ = c.Close()
}

func (s *stallers) Stop() {
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// TestStalledHandshakesDoNotLockOutAdmission: 16 source addresses open
// twice the cap in TCP connections that never send a ClientHello (each
// holds its share: the cap is full and as many wait in the backlog), and
// dial again whenever one is closed. Before the fix a connection in its
// handshake never gave its place (only idle ones did), and the handshake
// lasted the header timeout (5 s): each review's connection waited in the
// backlog behind a cap's worth of stalled ones and none of 12 was answered
// within the API server's 5 s. Now a handshake has its own, shorter
// deadline, and near the cap the source holding the most gives a place.
func TestStalledHandshakesDoNotLockOutAdmission(t *testing.T) {
	const capN, sources = 256, 16
	url, stop := startServerOpts(t, WebhookServerOptions{MaxConnections: capN, MaxConnectionsPerSource: capN / 8, Log: logr.Discard()})
	defer stop()
	attack := stall(t, strings.TrimPrefix(url, "https://"), sources, 2*capN/sources, true)
	defer attack.Stop() // before the server stops, which waits for them
	review := trainingPodReview(t)
	answered := 0
	var took []time.Duration
	for range 12 {
		code, d, err := reviewWithin(url, review)
		if err == nil && code == http.StatusOK {
			answered++
		} else {
			t.Logf("a review: %d, %v", code, err)
		}
		took = append(took, d.Round(time.Millisecond))
	}
	t.Logf("%d sources holding %d stalled handshakes: %d of 12 reviews answered, took %v", sources, 2*capN, answered, took)
	assert.Equal(t, 12, answered, "every review is answered within the API server's 5 s while many sources stall handshakes")
}

// TestFreshConnectionIsNotEvicted: the API server's connection has
// finished its handshake and is about to send its review when stalled
// connections from other addresses push past the cap. Before the fix the
// only connection counted idle was the API server's fresh one, so it was
// the one closed (in the audit 3 of 12 reviews failed with EOF); now a
// connection that just finished its handshake never gives its place, and
// the place is taken from the source holding the most, in its handshake:
// - "8 sources": eight addresses with a share each (the audit's);
// - "the API server holds the most": 68 addresses with one each, the API
// server's address four fresh ones.
func TestFreshConnectionIsNotEvicted(t *testing.T) {
	const capN = 64
	for _, tc := range []struct {
		name               string
		sources, perSource int
		fresh              int
	}{
		{"8 sources", 8, capN / 8, 1},
		{"the API server holds the most", capN + 4, 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, url, stop := startServerObj(t, WebhookServerOptions{MaxConnections: capN, MaxConnectionsPerSource: capN / 8, Log: logr.Discard()}, t.TempDir())
			defer stop()
			addr := strings.TrimPrefix(url, "https://")
			var apiServer []*tls.Conn
			defer closeAll(&apiServer)
			for range tc.fresh {
				c := dialFrom(addr, "127.0.0.1")
				require.NotNil(t, c)
				apiServer = append(apiServer, c)
			}
			ln := listenerOf(srv)
			require.Eventually(t, func() bool { _, idle := fromSource(ln, "127.0.0.1"); return idle == tc.fresh }, 5*time.Second, time.Millisecond,
				"the server waits for the API server's first request")
			accepted := counterValue(t, "trainguard_webhook_connections_total", nil)
			attack := stall(t, addr, tc.sources, tc.perSource, false)
			defer attack.Stop()
			require.Eventually(t, func() bool { return counterValue(t, "trainguard_webhook_connections_total", nil)-accepted >= capN },
				5*time.Second, 5*time.Millisecond, "the server accepts the stalled connections, a cap's worth at least")
			time.Sleep(200 * time.Millisecond) // and what waits in the backlog, where it has room
			review := trainingPodReview(t)
			answered := 0
			for _, c := range apiServer {
				if code, err := answer(c, review); err == nil && code == http.StatusOK {
					answered++
				} else {
					t.Logf("a review on a fresh connection: %d, %v", code, err)
				}
			}
			assert.Equal(t, tc.fresh, answered, "the API server's fresh connections carry their reviews")
		})
	}
}

// answer sends one review on c and returns the status of its answer.
func answer(c *tls.Conn, body []byte) (int, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		webhook.PathMutatePod, len(body), body); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// listenerOf is the server's listener, once it serves.
func listenerOf(srv ctrlwebhook.Server) *limitListener {
	ws := srv.(*webhookServer)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.ln
}

// counterValue reads a counter of controller-runtime's registry, which
// the server's metrics are registered in; 0 when it has no such series.
func counterValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
