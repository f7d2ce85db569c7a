package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/webhook"
)

// blocking is a handler that holds its slot until released.
type blocking struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	b.entered <- struct{}{}
	<-b.release
	w.WriteHeader(http.StatusOK)
}

// serve sends a body of contentLength bytes, or "{}" of unknown length for -1.
func serve(h http.Handler, contentLength int64) *httptest.ResponseRecorder {
	body := "{}"
	if contentLength >= 0 && contentLength <= webhook.MaxRequestBytes {
		body = strings.Repeat(" ", int(contentLength))
	}
	req := httptest.NewRequest(http.MethodPost, "/mutate-v1-pod", strings.NewReader(body))
	req.ContentLength = contentLength
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestLimiterRefusesBeyondConcurrencyWith429(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := NewLimiter(LimiterOptions{MaxConcurrent: 2, QueueWait: 50 * time.Millisecond}, logr.Discard()).Wrap(b)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = serve(h, 100).Code }()
		<-b.entered
	}
	rec := serve(h, 100)
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Contains(t, rec.Body.String(), "trainguard webhook is busy")
	assert.Contains(t, rec.Body.String(), "--max-concurrent-reviews")
	close(b.release)
	wg.Wait()
	assert.Equal(t, []int{http.StatusOK, http.StatusOK}, codes)
	assert.Equal(t, http.StatusOK, serve(h, 100).Code, "slots are given back")
}

func TestLimiterBoundsBytesInFlight(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 4), release: make(chan struct{})}
	// Room for two maximum-size bodies, and slots to spare.
	h := NewLimiter(LimiterOptions{MaxConcurrent: 10, MaxInFlightBytes: 2 * webhook.MaxRequestBytes, QueueWait: 50 * time.Millisecond}, logr.Discard()).Wrap(b)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); serve(h, webhook.MaxRequestBytes) }()
		<-b.entered
	}
	assert.Equal(t, http.StatusTooManyRequests, serve(h, 1<<20).Code, "no room for another MiB")
	assert.Equal(t, http.StatusTooManyRequests, serve(h, -1).Code, "a body of unknown length counts what arrived, and there is no room left")
	// A body over the cap is refused by the handler from its header alone,
	// so it needs no room: it reaches the handler (here: blocks in it).
	wg.Add(1)
	go func() { defer wg.Done(); serve(h, webhook.MaxRequestBytes+1) }()
	select {
	case <-b.entered:
	case <-time.After(5 * time.Second):
		require.Fail(t, "an oversized request must reach the handler to be refused with 413")
	}
	close(b.release)
	wg.Wait()
}

// TestLimiterHandsTheHandlerTheBodyItRead: the handler sees the very body
// the limiter received, with its length, whether declared or not.
func TestLimiterHandsTheHandlerTheBodyItRead(t *testing.T) {
	var got []string
	var lengths []int64
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		got, lengths = append(got, string(b)), append(lengths, r.ContentLength)
		w.WriteHeader(http.StatusOK)
	})
	h := NewLimiter(LimiterOptions{}, logr.Discard()).Wrap(echo)
	big := strings.Repeat("x", 3*maxChunk+12345) // several chunks
	for _, tc := range []struct {
		body string
		cl   int64
	}{{big, int64(len(big))}, {big, -1}, {"{}", 2}, {"", 0}} {
		req := httptest.NewRequest(http.MethodPost, "/mutate-v1-pod", strings.NewReader(tc.body))
		req.ContentLength = tc.cl
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code)
	}
	assert.Equal(t, []string{big, big, "{}", ""}, got)
	assert.Equal(t, []int64{int64(len(big)), int64(len(big)), 2, 0}, lengths)
}

// TestLimiterRefusesABodyShorterThanDeclared: 400 naming what arrived.
func TestLimiterRefusesABodyShorterThanDeclared(t *testing.T) {
	h := NewLimiter(LimiterOptions{}, logr.Discard()).Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a truncated body must not reach the handler")
	}))
	req := httptest.NewRequest(http.MethodPost, "/mutate-v1-pod", strings.NewReader("{}"))
	req.ContentLength = 100
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Contains(t, rec.Body.String(), "2 of 100 bytes")
}

func TestLimiterAlwaysAdmitsOneMaximumReview(t *testing.T) {
	l := NewLimiter(LimiterOptions{MaxInFlightBytes: 1}, logr.Discard())
	assert.Equal(t, int64(webhook.MaxRequestBytes), l.maxBytes)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	assert.Equal(t, http.StatusOK, serve(l.Wrap(ok), webhook.MaxRequestBytes).Code)
}
