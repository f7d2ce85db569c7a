package server

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
