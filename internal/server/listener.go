package server

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// limitListener accepts at most max connections at once: past that, Accept
// waits until one closes, and new clients wait in the kernel's backlog.
// Every open connection costs its TLS state and read and write buffers
// (about 25 KiB); without a cap about ten thousand idle keep-alive
// connections, which cost an attacker nothing, reach the chart's memory
// limit. The cap protects memory; who may connect at all is the
// NetworkPolicy's business.
//
// A cap alone is a lock anyone can hold: 1,024 keep-alive connections
// sending one tiny request every 20 s kept it full for ever, and every new
// connection, the API server's included, waited past its deadline (issue
// 31, item 2). So the cap is shared out:
//   - one source address holds at most perSource connections; one more is
//     closed at once, before its TLS handshake, and costs nothing;
//   - past idleCloseAt (three quarters of the cap) an idle keep-alive
//     connection is closed, the longest idle first, as soon as a new one
//     arrives, and every answer says `Connection: close` (nearCap): near
//     the cap a place is held only while a request is in flight, and a
//     request is bounded by the header, body and write timeouts.
//
// The API server loses nothing by either: it reconnects (a handshake) and
// it keeps far fewer connections to one webhook than perSource.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	open prometheus.Gauge
	// refused counts connections closed at accept (over perSource) and
	// idle connections closed early near the cap.
	refused      *prometheus.CounterVec
	perSource    int
	idleCloseAt  int
	log          logr.Logger
	mu           sync.Mutex
	bySource     map[string]int
	conns        map[*limitedConn]struct{}
	lastRefusal  time.Time
	refusedSince int
	// done unblocks a waiting Accept when the listener closes.
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, maxConns, perSource int, open prometheus.Gauge, refused *prometheus.CounterVec, log logr.Logger) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, maxConns), open: open, refused: refused,
		perSource: perSource, idleCloseAt: maxConns * 3 / 4, log: log,
		bySource: map[string]int{}, conns: map[*limitedConn]struct{}{}, done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.sem <- struct{}{}:
		default:
			// At the cap: an idle keep-alive gives its place to whoever
			// waits in the backlog.
			l.mu.Lock()
			victim := l.longestIdle()
			if victim != nil {
				victim.idleSince = time.Time{}
			}
			l.mu.Unlock()
			if victim != nil {
				l.closeIdle(victim)
			}
			select {
			case l.sem <- struct{}{}:
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		// Over its source's share: closed before the handshake, and the
		// next connection is accepted (an error would make the server back off).
		_ = c.Close()
		<-l.sem
	}
}

// admit counts c against its source, or returns nil when the source holds
// its share already. Past idleCloseAt it closes the longest-idle connection.
func (l *limitListener) admit(c net.Conn) *limitedConn {
	src := sourceOf(c.RemoteAddr())
	l.mu.Lock()
	if l.bySource[src] >= l.perSource {
		l.noteRefusal(src)
		l.mu.Unlock()
		l.refused.WithLabelValues("per-source").Inc()
		return nil
	}
	l.bySource[src]++
	lc := &limitedConn{Conn: c, l: l, source: src}
	l.conns[lc] = struct{}{}
	var victim *limitedConn
	if len(l.conns) > l.idleCloseAt {
		if victim = l.longestIdle(); victim != nil {
			victim.idleSince = time.Time{} // closing: not picked again
		}
	}
	l.mu.Unlock()
	l.open.Inc()
	if victim != nil {
		l.closeIdle(victim)
	}
	return lc
}

// noteRefusal logs refusals at most every 10 s, with their count: a flood
// must not flood the log too. Called with mu held.
func (l *limitListener) noteRefusal(src string) {
	l.refusedSince++
	if now := time.Now(); now.Sub(l.lastRefusal) >= 10*time.Second {
		l.log.Info("refused webhook connections: the source holds its share of the connection cap (--webhook-max-connections-per-source)",
			"source", src, "perSource", l.perSource, "refusedSinceLastLog", l.refusedSince)
		l.lastRefusal, l.refusedSince = now, 0
	}
}

// longestIdle is the connection idle the longest, or nil. Called with mu held.
func (l *limitListener) longestIdle() *limitedConn {
	var victim *limitedConn
	for c := range l.conns {
		if !c.idleSince.IsZero() && (victim == nil || c.idleSince.Before(victim.idleSince)) {
			victim = c
		}
	}
	return victim
}

// closeIdle closes the raw connection under an idle keep-alive: the server's
// read of the next request fails and it ends the connection, as its own
// idle timeout would. The raw close sends no TLS alert, so it never waits on
// a peer that does not read.
func (l *limitListener) closeIdle(c *limitedConn) {
	l.refused.WithLabelValues("idle-near-cap").Inc()
	_ = c.Conn.Close()
}

// connState follows the server's view of each connection: idle between
// requests, active while one is read or handled. It is http.Server's
// ConnState hook; conn is the *tls.Conn over a limitedConn.
func (l *limitListener) connState(conn net.Conn, state http.ConnState) {
	lc := limitedOf(conn)
	if lc == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, open := l.conns[lc]; !open {
		return
	}
	if state == http.StateIdle {
		lc.idleSince = time.Now()
	} else {
		lc.idleSince = time.Time{}
	}
}

// nearCap says whether more than idleCloseAt connections are open: answers
// then close their connection instead of keeping it alive (the server
// closes it gracefully, after the answer is sent).
func (l *limitListener) nearCap() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns) > l.idleCloseAt
}

func (l *limitListener) release(c *limitedConn) {
	l.mu.Lock()
	if _, ok := l.conns[c]; ok {
		delete(l.conns, c)
		if l.bySource[c.source]--; l.bySource[c.source] <= 0 {
			delete(l.bySource, c.source)
		}
	}
	l.mu.Unlock()
	l.open.Dec()
	<-l.sem
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// sourceOf is the address a connection comes from, without its port.
func sourceOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedOf finds the limitedConn under a connection the server hands its
// ConnState hook (a *tls.Conn), or nil.
func limitedOf(c net.Conn) *limitedConn {
	for c != nil {
		if lc, ok := c.(*limitedConn); ok {
			return lc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

// limitedConn gives its place back once, however often it is closed.
type limitedConn struct {
	net.Conn
	l      *limitListener
	source string
	// idleSince is when the server last found it idle; zero while a
	// request is in flight. Guarded by l.mu.
	idleSince time.Time
	once      sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
