package trainerstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func TestParseStatusRefusesHostileBodies(t *testing.T) {
	good := `{"format":1,"now":1000,"step":12,"committed_step":10,"committed_at":990,"save_seconds":0.5}`
	s, err := ParseStatus([]byte(good))
	require.NoError(t, err)
	secs, steps, ok := s.Since()
	assert.True(t, ok)
	assert.InDelta(t, 10, secs, 0)
	assert.Equal(t, int64(2), steps)

	_, err = ParseStatus([]byte(`{"format":1,"now":1000,"step":0,"committed_step":null,"committed_at":null,"save_seconds":null}`))
	require.NoError(t, err, "nothing committed yet")

	for name, body := range map[string]string{
		"unknown field":           `{"format":1,"now":1000,"step":1,"x":1}`,
		"trailing data":           good + `{}`,
		"format":                  strings.Replace(good, `"format":1`, `"format":2`, 1),
		"negative step":           strings.Replace(good, `"step":12`, `"step":-1`, 1),
		"huge step":               strings.Replace(good, `"step":12`, `"step":9007199254740993`, 1),
		"commit in the future":    strings.Replace(good, `"committed_at":990`, `"committed_at":2000`, 1),
		"commit without its time": `{"format":1,"now":1000,"step":1,"committed_step":1}`,
		"negative save":           strings.Replace(good, `"save_seconds":0.5`, `"save_seconds":-1`, 1),
		"a save of years":         strings.Replace(good, `"save_seconds":0.5`, `"save_seconds":1e12`, 1),
		"not JSON":                `trainguard`,
		"too long":                `{"format":1,"now":1000,"step":1}` + strings.Repeat(" ", 2000),
		"no now":                  `{"format":1,"step":1}`,
	} {
		_, err := ParseStatus([]byte(body))
		assert.Error(t, err, name)
	}
}

func TestHTTPFetcherDialsOnlyAnIP(t *testing.T) {
	_, err := HTTPFetcher()(context.Background(), "example.com")
	require.ErrorContains(t, err, "not an IP", "a name is never dialled")
}

// trainer is a trainer's status port: an httptest server the real requester
// reaches through its dialler, as if at podIP:StatusPort.
func trainer(t *testing.T, h http.HandlerFunc) Requester {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	want := net.JoinHostPort("192.0.2.7", strconv.Itoa(contract.StatusPort))
	return HTTPRequesterVia(func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != want {
			return nil, fmt.Errorf("dialled %s, want %s", addr, want)
		}
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	})
}

func TestHTTPRequesterPostsTheRequestAndReadsTheAck(t *testing.T) {
	var got map[string]any
	req := trainer(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, http.MethodPost, r.Method)
		assert.Equal(t, contract.CheckpointNowPath, r.URL.Path)
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		assert.Positive(t, r.ContentLength, "the SDK requires a Content-Length")
		assert.NoError(t, json.NewDecoder(r.Body).Decode(&got))
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"format":1,"step":41}`)
	})
	ack, err := req(context.Background(), "192.0.2.7", "node node-a: MaintenancePlanned\n\u00e9"+strings.Repeat("x", 500))
	require.NoError(t, err)
	assert.Equal(t, Ack{Step: 41}, ack)
	assert.EqualValues(t, 1, got["format"])
	reason, _ := got["reason"].(string)
	assert.Len(t, reason, MaxReason, "bounded")
	assert.True(t, strings.HasPrefix(reason, "node node-a: MaintenancePlanned??xx"), "printable ASCII only: %q", reason)
}

func TestHTTPRequesterRateLimited(t *testing.T) {
	for after, want := range map[string]string{"7": "retry in 7s", "": "", "-1": "", "1e9": ""} {
		req := trainer(t, func(w http.ResponseWriter, _ *http.Request) {
			if after != "" {
				w.Header().Set("Retry-After", after)
			}
			w.WriteHeader(http.StatusTooManyRequests)
		})
		_, err := req(context.Background(), "192.0.2.7", "x")
		require.ErrorIs(t, err, ErrRateLimited, "Retry-After %q", after)
		if want != "" {
			assert.ErrorContains(t, err, want)
		} else {
			assert.NotContains(t, err.Error(), "retry in", "a hostile Retry-After %q is not repeated", after)
		}
	}
}

func TestHTTPRequesterRefusesHostileAnswers(t *testing.T) {
	for name, tc := range map[string]struct {
		code int
		body string
		want string
	}{
		"refused with a reason": {http.StatusBadRequest, `{"format":1,"error":"format must be 1\u0007"}`, "400 Bad Request: format must be 1?"},
		"refused, garbage":      {http.StatusServiceUnavailable, `<html>`, "503 Service Unavailable"},
		"an old trainer":        {http.StatusNotFound, ``, "404 Not Found"},
		"accepted, no step":     {http.StatusAccepted, `{"format":1}`, "no step"},
		"accepted, bad step":    {http.StatusAccepted, `{"format":1,"step":-1}`, "out of range"},
		"accepted, huge step":   {http.StatusAccepted, `{"format":1,"step":9007199254740993}`, "out of range"},
		"accepted, format":      {http.StatusAccepted, `{"format":2,"step":1}`, "format 2"},
		"accepted, extra field": {http.StatusAccepted, `{"format":1,"step":1,"x":1}`, "x"},
		"accepted, too long":    {http.StatusAccepted, `{"format":1,"step":1}` + strings.Repeat(" ", 2000), "more than"},
		"accepted, not JSON":    {http.StatusAccepted, `ok`, ""},
	} {
		req := trainer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(tc.code)
			_, _ = io.WriteString(w, tc.body)
		})
		_, err := req(context.Background(), "192.0.2.7", "x")
		require.Error(t, err, name)
		assert.NotErrorIs(t, err, ErrRateLimited, name)
		assert.ErrorContains(t, err, tc.want, name)
	}
}

func TestHTTPRequesterDialsOnlyAnIP(t *testing.T) {
	_, err := HTTPRequester()(context.Background(), "example.com", "x")
	require.ErrorContains(t, err, "not an IP", "a name is never dialled")
}

func TestHTTPRequesterIsBoundedInTime(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() { // accept, read, never answer: a hung trainer
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	req := HTTPRequesterVia(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, ln.Addr().String())
	})
	start := time.Now()
	_, err = req(context.Background(), "192.0.2.7", "x")
	require.Error(t, err)
	assert.Less(t, time.Since(start), Timeout+time.Second)
}
