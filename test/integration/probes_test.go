package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestProbesAndMetrics: the chart's readiness and liveness probes pass once
// trainguard serves TLS and its informers have synced, and the Prometheus
// endpoint carries trainguard's own metrics.
func TestProbesAndMetrics(t *testing.T) {
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = get(t, "http://"+env.probes+"/readyz?verbose=1")
		return code == http.StatusOK
	}, 10*time.Second, 100*time.Millisecond, "readyz never passed: %s", body)
	// Once ready, it stays ready: a probe that flaps takes replicas in and
	// out of the Service at random.
	for i := 0; i < 30; i++ {
		code, body := get(t, "http://"+env.probes+"/readyz?verbose=1")
		require.Equal(t, http.StatusOK, code, "readyz flapped on check %d: %s", i, body)
	}
	assert.Contains(t, body, "webhook-tls ok")
	assert.Contains(t, body, "informers-synced ok")
	code, _ := get(t, "http://"+env.probes+"/healthz")
	assert.Equal(t, http.StatusOK, code)
	ns := namespace(t, true, nil)
	require.NoError(t, env.c.Create(context.Background(), newPod(ns, "counted").Obj()))
	code, metrics := get(t, "http://"+env.metrics+"/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.True(t, strings.Contains(metrics, `trainguard_admission_decisions_total{decision="patched",webhook="mutate-pod"}`), "admission metrics are exported")
}
