package server

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/trainguard/trainguard/webhook"
)

// TestSlowBodyIsCutOffByTheReadTimeout: a client that declares a body and
// trickles it (or never sends it) loses its connection at the read timeout
// instead of holding a goroutine, a buffer and a limiter slot for ever.
func TestSlowBodyIsCutOffByTheReadTimeout(t *testing.T) {
	url, stop := startServerOpts(t, WebhookServerOptions{ReadTimeout: 300 * time.Millisecond, Log: logr.Discard()})
	defer stop()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true}) // throwaway cert
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST "+webhook.PathMutatePod+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadAll(conn) // returns once the server closes the connection
	var netErr net.Error
	if errors.As(err, &netErr) {
		assert.False(t, netErr.Timeout(), "the server, not the client's 10 s deadline, must end the exchange")
	}
	assert.Less(t, time.Since(start), 5*time.Second, "the connection must be closed at the server's read timeout")
}

// TestIdleTimeoutOutlastsTheAPIServers: the API server's webhook client
// (client-go's transport, built by utilnet.SetTransportDefaults) keeps idle
// keep-alive connections for its IdleConnTimeout and reuses them; a server
// that closes an idle connection first races that reuse, and the review
// written into the closing connection fails with "broken pipe", which the
// API server does not retry: a fail-closed webhook refuses the object.
func TestIdleTimeoutOutlastsTheAPIServers(t *testing.T) {
	apiServer := utilnet.SetTransportDefaults(&http.Transport{})
	require.Positive(t, apiServer.IdleConnTimeout, "the API server's webhook client closes idle connections")
	assert.Greater(t, DefaultIdleTimeout, apiServer.IdleConnTimeout,
		"trainguard must not close an idle connection the API server may still reuse")
}

// TestUnusedConnectionOutlastsTheHeaderTimeout: the API server's transport
// dials connections during a burst and parks the ones it did not need in
// its idle pool, handshake done, no request sent. A server that closes
// such a connection at its header timeout (net/http times a connection's
// first request from the handshake, not from the request's first byte)
// races its reuse by the next burst: "write: broken pipe", not retried, a
// refused pod (make scale, 5,000 nodes). An unused connection waits for
// its first request as long as an idle keep-alive does; the header
// timeout starts at the request's first byte.
func TestUnusedConnectionOutlastsTheHeaderTimeout(t *testing.T) {
	url, stop := startServerOpts(t, WebhookServerOptions{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 5 * time.Second, Log: logr.Discard()})
	defer stop()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true}) // throwaway cert
	require.NoError(t, err)
	defer conn.Close()
	time.Sleep(time.Second) // parked: past the header timeout, within the idle one
	assert.True(t, keepAliveRequest(t, conn, bufio.NewReader(conn), http.MethodPost, webhook.PathMutatePod, trainingPodReview(t)),
		"the parked connection serves its first review")
}

// TestUnusedConnectionsYieldAtTheCap: connections that never send a
// request, waiting the idle timeout now, lock nothing (issue 31): at the
// cap the longest unused gives its place, and a review is served.
func TestUnusedConnectionsYieldAtTheCap(t *testing.T) {
	const capN = 4
	url, stop := startServerOpts(t, WebhookServerOptions{MaxConnections: capN, Log: logr.Discard()})
	defer stop()
	var held []*tls.Conn
	defer closeAll(&held)
	for range capN {
		c := dialFrom(strings.TrimPrefix(url, "https://"), "127.0.0.2")
		require.NotNil(t, c)
		held = append(held, c)
	}
	code, took, err := reviewWithin(url, trainingPodReview(t))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	assert.Less(t, took, 5*time.Second, "within the API server's budget")
	assert.Less(t, stillOpen(held), capN, "an unused connection gave its place")
}
