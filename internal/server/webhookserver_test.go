package server

import (
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
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // throwaway cert
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
