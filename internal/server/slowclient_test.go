package server

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/webhook"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// headerOnly opens a TLS connection and sends a review's headers declaring
// a body of declared bytes, and no body: the attack of issue 24 item 4.
func headerOnly(t *testing.T, addr string, declared int64) net.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // throwaway cert
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		webhook.PathMutatePod, declared)
	require.NoError(t, err)
	return conn
}

// waitInFlight waits until the server has read the request on n
// connections. Until it reads a connection's first bytes the connection is
// idle to it and gives its place to a newcomer past three quarters of the
// cap, so a test that fills the cap with requests in flight dials the next
// connection only after this (CI once saw the connection beyond the cap
// served: it had taken the place of the last one, still counted idle).
func waitInFlight(t *testing.T, srv ctrlwebhook.Server, n int) {
	t.Helper()
	ws := srv.(*webhookServer)
	ws.mu.Lock()
	ln := ws.ln
	ws.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for ln.inFlight() < n {
		if time.Now().After(deadline) {
			require.Failf(t, "requests not read", "the server read %d of %d requests in 10 s", ln.inFlight(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// realReview posts an ordinary pod review as the API server would and
// returns the status, the answer and how long it took.
func realReview(t *testing.T, url string) (int, []byte, time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // throwaway cert
	}}
	defer client.CloseIdleConnections()
	start := time.Now()
	resp, err := client.Post(url+webhook.PathMutatePod, "application/json", bytes.NewReader(trainingPodReview(t)))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body, time.Since(start)
}

// TestHeaderOnlyClientsDoNotLockOutAdmission: clients that send headers
// declaring large bodies (3 connections: 7+7+2 MiB, the whole byte budget)
// or many small ones (64: every slot), and then nothing, no longer make a
// concurrent real review wait for room or get 429: nothing is charged
// before the body arrives. Before the fix the review got 429 after the
// queue wait (3 s), whatever the replica count. The time taken is logged,
// not asserted.
func TestHeaderOnlyClientsDoNotLockOutAdmission(t *testing.T) {
	for _, tc := range []struct {
		name     string
		declared []int64
	}{
		{"byte budget: 7+7+2 MiB declared", []int64{7 << 20, 7 << 20, 2 << 20}},
		{"slots: 64 small bodies declared", repeat(1024, DefaultMaxConcurrent)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The read timeout is long, so the attackers stay connected for
			// the whole test: what lets the review through is the limiter.
			url, stop := startServerOpts(t, WebhookServerOptions{ReadTimeout: time.Minute, Log: logr.Discard()})
			defer stop()
			addr := strings.TrimPrefix(url, "https://")
			conns := make([]net.Conn, 0, len(tc.declared))
			defer func() { // before the server stops, which waits for them
				for _, c := range conns {
					_ = c.Close()
				}
			}()
			for _, n := range tc.declared {
				conns = append(conns, headerOnly(t, addr, n))
			}
			time.Sleep(200 * time.Millisecond) // let the server read every attacker's headers
			status, body, took := realReview(t, url)
			t.Logf("a real review took %s (status %d) with %d header-only connections open", took.Round(time.Millisecond), status, len(tc.declared))
			require.Equal(t, http.StatusOK, status, "the real review is handled, not refused: %s", body)
			review, err := admissionio.DecodeReviewResponse(body)
			require.NoError(t, err)
			assert.True(t, review.Response.Allowed)
		})
	}
}

func repeat(n int64, times int) []int64 {
	out := make([]int64, times)
	for i := range out {
		out[i] = n
	}
	return out
}

// TestWithheldBodyIsCutOffWith408: a client that declares a body and sends
// only part of it loses its connection at the body read timeout, with a
// 408 that says how much arrived.
func TestWithheldBodyIsCutOffWith408(t *testing.T) {
	url, stop := startServerOpts(t, WebhookServerOptions{ReadTimeout: time.Minute,
		Limits: LimiterOptions{BodyReadTimeout: 200 * time.Millisecond}, Log: logr.Discard()})
	defer stop()
	conn := headerOnly(t, strings.TrimPrefix(url, "https://"), 1000)
	defer conn.Close()
	_, err := io.WriteString(conn, `{"kind":`)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	answer, err := io.ReadAll(conn) // the server answers and closes
	require.NoError(t, err)
	assert.Contains(t, string(answer), "408 Request Timeout")
	assert.Contains(t, string(answer), "8 of 1000 bytes")
}

// TestConnectionCapHolds: with 4 connections open, each with a review in
// flight (its body withheld: an unused connection is idle and gives its
// place at the cap), a fifth client's TLS handshake is not served until one
// of them closes; then it is.
func TestConnectionCapHolds(t *testing.T) {
	const capN = 4
	srv, url, stop := startServerObj(t, WebhookServerOptions{ReadTimeout: time.Minute, ReadHeaderTimeout: time.Minute,
		MaxConnections: capN, Limits: LimiterOptions{BodyReadTimeout: time.Minute}, Log: logr.Discard()}, t.TempDir())
	defer stop()
	addr := strings.TrimPrefix(url, "https://")
	held := make([]net.Conn, capN)
	for i := range held {
		held[i] = headerOnly(t, addr, 1000)
		waitInFlight(t, srv, i+1)
	}
	const extra = 3
	served := make(chan error, extra)
	waiting := make(chan net.Conn, extra)
	for range extra {
		go func() {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // throwaway cert
			if err == nil {
				waiting <- c
			}
			served <- err
		}()
	}
	time.Sleep(500 * time.Millisecond) // room for the cap to be broken, if it were
	assert.Zero(t, len(served), "no connection beyond the cap is served while %d are open", capN)
	for _, c := range held[:extra] {
		require.NoError(t, c.Close())
	}
	for range extra {
		select {
		case err := <-served:
			require.NoError(t, err, "a waiting client is served once a place is free")
		case <-time.After(30 * time.Second):
			require.Fail(t, "a waiting client was not served after places were freed")
		}
	}
	for _, c := range held[extra:] {
		require.NoError(t, c.Close())
	}
	for range extra {
		require.NoError(t, (<-waiting).Close())
	}
	status, body, _ := realReview(t, url)
	assert.Equal(t, http.StatusOK, status, "%s", body)
}
