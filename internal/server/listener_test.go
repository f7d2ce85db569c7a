package server

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNearCapVictimOrder: which connection gives its place near the cap.
// The source holding the most goes first (a flood's places come from the
// flood, not from the API server's few), within it an idle connection
// before one in its handshake, the longest held first; never a connection
// with a request in flight, one already closing, the newcomer itself, or
// one that finished its handshake less than freshFor ago (it is about to
// carry a review): with only such connections, the answer is when the
// first fresh one may go. A handshake under way for less than
// minHandshake is spared too.
func TestNearCapVictimOrder(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	type conn struct {
		name, source string
		idle         time.Duration // idle this long (0: not idle)
		handshake    time.Duration // in its handshake this long (0: done)
		waitingFirst bool
		closing      bool
	}
	for _, tc := range []struct {
		name         string
		conns        []conn
		minHandshake time.Duration
		want         string // "": none
		retry        time.Duration
	}{
		{"the source holding the most, though its handshake is younger than another's long idle", []conn{
			{name: "api-idle", source: "10.0.0.1", idle: time.Minute},
			{name: "flood-1", source: "10.0.0.9", handshake: time.Millisecond},
			{name: "flood-2", source: "10.0.0.9", handshake: 2 * time.Millisecond},
		}, 0, "flood-2", 0},
		{"within a source, idle before a handshake, the longest idle first", []conn{
			{name: "handshake", source: "10.0.0.9", handshake: time.Second},
			{name: "idle-short", source: "10.0.0.9", idle: time.Second},
			{name: "idle-long", source: "10.0.0.9", idle: time.Minute},
		}, 0, "idle-long", 0},
		{"within a source, the oldest handshake", []conn{
			{name: "young", source: "10.0.0.9", handshake: time.Millisecond},
			{name: "old", source: "10.0.0.9", handshake: time.Second},
		}, 0, "old", 0},
		{"never a request in flight, nor one closing", []conn{
			{name: "active-1", source: "10.0.0.9"},
			{name: "active-2", source: "10.0.0.9"},
			{name: "closing", source: "10.0.0.9", handshake: time.Second, closing: true},
			{name: "api", source: "10.0.0.1", handshake: time.Millisecond},
		}, 0, "api", 0},
		{"never a fresh one, even of the source holding the most", []conn{
			{name: "fresh-1", source: "10.0.0.1", idle: 100 * time.Millisecond, waitingFirst: true},
			{name: "fresh-2", source: "10.0.0.1", idle: 200 * time.Millisecond, waitingFirst: true},
			{name: "other", source: "10.0.0.9", handshake: time.Millisecond},
		}, 0, "other", 0},
		{"an unused connection is parked once no longer fresh", []conn{
			{name: "parked", source: "10.0.0.1", idle: 2 * freshFor, waitingFirst: true},
			{name: "other", source: "10.0.0.9", idle: freshFor * 3 / 2},
		}, 0, "parked", 0},
		{"only fresh ones: none, until the first may go", []conn{
			{name: "fresh-1", source: "10.0.0.1", idle: freshFor / 4, waitingFirst: true},
			{name: "fresh-2", source: "10.0.0.2", idle: freshFor / 2, waitingFirst: true},
			{name: "active", source: "10.0.0.3"},
		}, 0, "", freshFor / 2},
		{"past three quarters, a young handshake is not closed for the next", []conn{
			{name: "young", source: "10.0.0.9", handshake: freshFor / 2},
			{name: "young-too", source: "10.0.0.9", handshake: freshFor / 4},
			{name: "stalled", source: "10.0.0.1", handshake: 2 * freshFor},
		}, freshFor, "stalled", 0},
		{"at the cap, a handshake of less than handshakeGrace is spared", []conn{
			{name: "young", source: "10.0.0.9", handshake: handshakeGrace / 2},
			{name: "fresh", source: "10.0.0.1", idle: freshFor / 2, waitingFirst: true},
		}, handshakeGrace, "", handshakeGrace / 2},
		{"nothing to give", []conn{{name: "active", source: "10.0.0.3"}}, 0, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimitListener(nil, 16, 16, time.Second, time.Minute, nil, nil, logr.Discard())
			names := map[*limitedConn]string{}
			for _, c := range tc.conns {
				lc := &limitedConn{l: l, source: c.source, waitingFirst: c.waitingFirst, closing: c.closing}
				if c.idle > 0 {
					lc.idleSince = ago(c.idle)
				}
				if c.handshake > 0 {
					lc.handshakeFrom = ago(c.handshake)
				}
				l.conns[lc] = struct{}{}
				l.bySource[c.source]++
				names[lc] = c.name
			}
			newcomer := &limitedConn{l: l, source: "10.0.0.100", handshakeFrom: now}
			l.conns[newcomer] = struct{}{}
			l.bySource[newcomer.source]++
			victim, retry := l.nearCapVictim(newcomer, now, tc.minHandshake)
			assert.Equal(t, tc.want, names[victim])
			if tc.retry == 0 {
				assert.True(t, retry.IsZero(), "no retry: %v", retry)
			} else {
				assert.Equal(t, now.Add(tc.retry), retry)
			}
		})
	}
}

// TestHandshakeHasItsOwnDeadline: a connection that sends no ClientHello
// is closed at the handshake timeout, not at the header or read timeout
// (net/http's choice for the handshake, the shortest of them); once the
// handshake is done that deadline no longer applies: the connection waits
// for its first request as long as the idle timeout allows.
func TestHandshakeHasItsOwnDeadline(t *testing.T) {
	const handshake = 300 * time.Millisecond
	url, stop := startServerOpts(t, WebhookServerOptions{HandshakeTimeout: handshake, ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute,
		WriteTimeout: time.Minute, Log: logr.Discard()})
	defer stop()
	addr := strings.TrimPrefix(url, "https://")

	raw, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer raw.Close()
	start := time.Now()
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = raw.Read(make([]byte, 1))
	require.Error(t, err, "the server closes a connection that sends no ClientHello")
	closedAfter := time.Since(start)
	t.Logf("a connection without a ClientHello was closed after %s", closedAfter.Round(time.Millisecond))
	assert.GreaterOrEqual(t, closedAfter, handshake-50*time.Millisecond)
	assert.Less(t, closedAfter, 5*time.Second, "at the handshake timeout, not the header timeout")

	c := dialFrom(addr, "127.0.0.1")
	require.NotNil(t, c)
	defer c.Close()
	time.Sleep(2 * handshake)
	code, err := answer(c, trainingPodReview(t))
	require.NoError(t, err, "a connection past its handshake is not held to the handshake's deadline")
	assert.Equal(t, http.StatusOK, code)
}
