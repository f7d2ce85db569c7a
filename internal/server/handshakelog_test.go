package server

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a log destination several goroutines write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(substr string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// TestFailedHandshakesAreCountedNotLogged: peers that close before their
// ClientHello, speak plain HTTP, or refuse the serving certificate fail
// their handshakes. Before the fix net/http wrote a line to the process's
// standard log for each (its ErrorLog was nil, which means the standard
// logger, not silence): a minute of the stalled-handshake attack wrote
// 16,396 lines. Now each failure is counted by reason and the log says so
// at most once per interval, with the count of the lines it held back.
func TestFailedHandshakesAreCountedNotLogged(t *testing.T) {
	const n = 100
	std := &syncBuffer{}
	log.SetOutput(std)
	defer log.SetOutput(os.Stderr)
	logged := &syncBuffer{}
	url, stop := startServerOpts(t, WebhookServerOptions{Log: funcr.New(func(prefix, args string) {
		_, _ = fmt.Fprintln(logged, prefix, args)
	}, funcr.Options{})})
	defer stop()
	addr := strings.TrimPrefix(url, "https://")
	const metric = "trainguard_webhook_tls_handshake_failures_total"
	reasons := []string{"eof", "not-tls", "client-alert"}
	before := map[string]float64{}
	for _, r := range reasons {
		before[r] = counterValue(t, metric, map[string]string{"reason": r})
	}
	for range n {
		c, err := net.Dial("tcp", addr) // closed before its ClientHello
		require.NoError(t, err)
		_ = c.Close()

		c, err = net.Dial("tcp", addr) // plain HTTP to the TLS port
		require.NoError(t, err)
		_, _ = fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
		_ = c.Close()

		tc, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "localhost"}) // the dev CA is not trusted
		if err == nil {
			_ = tc.Close()
		}
		require.Error(t, err, "the client refuses the certificate")
	}
	assert.Eventually(t, func() bool {
		for _, r := range reasons {
			if counterValue(t, metric, map[string]string{"reason": r})-before[r] < n {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every failed handshake is counted by its reason")
	for _, r := range reasons {
		assert.Equal(t, float64(n), counterValue(t, metric, map[string]string{"reason": r})-before[r], "reason %s", r)
	}
	lines := append(std.lines("TLS handshake"), logged.lines("TLS handshake")...)
	t.Logf("%d failed handshakes, %d log lines; the first: %s", 3*n, len(lines), strings.Join(lines[:min(3, len(lines))], "\n"))
	assert.LessOrEqual(t, len(lines), 3, "failed handshakes do not flood the log")
	assert.Zero(t, len(std.lines("TLS handshake")), "nothing goes to the standard logger")
	assert.NotEmpty(t, logged.lines("TLS handshake"), "they are logged, through trainguard's logger")
}
