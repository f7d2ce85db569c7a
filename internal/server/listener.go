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
//   - one source address holds at most perSource connections; one more
//     takes the place of the source's own longest-idle connection, or,
//     when none of its connections is idle, is closed at once, before its
//     TLS handshake, and costs nothing (see admit);
//   - past idleCloseAt (three quarters of the cap), and at the cap for a
//     connection accepted and waiting for a place, a connection without a
//     request in flight gives its place to the new one: an idle
//     keep-alive, an unused connection, or one still in its TLS handshake
//     (see nearCapVictim), and every answer says `Connection: close`
//     (nearCap): near the cap a place is held only while a request is in
//     flight, and a request is bounded by the header, body and write
//     timeouts.
//
// The API server loses nothing by either: it reconnects (a handshake), it
// keeps far fewer connections in use to one webhook than perSource, and
// the idle ones it keeps in pools it no longer uses give way to its new ones.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	open prometheus.Gauge
	// refused counts connections closed at accept (over perSource) and
	// connections closed early near the cap.
	refused     *prometheus.CounterVec
	perSource   int
	idleCloseAt int
	// handshakeTimeout bounds a connection's TLS handshake from its
	// acceptance; zero leaves net/http's (its shortest timeout) in place.
	handshakeTimeout time.Duration
	idleTimeout      time.Duration
	log              logr.Logger
	mu               sync.Mutex
	bySource         map[string]int
	conns            map[*limitedConn]struct{}
	// closing counts the connections picked to give their place and not
	// yet released: room already on its way.
	closing      int
	lastRefusal  time.Time
	refusedSince int
	// done unblocks a waiting Accept when the listener closes.
	done      chan struct{}
	closeOnce sync.Once
}

// freshFor is how long a connection that has finished its TLS handshake
// and not yet sent its first request keeps its place near the cap. The API
// server writes its review as soon as its handshake is done, but until the
// server reads the first bytes the connection is counted idle; with the
// cap full of connections stalled in their handshakes (which did not give
// their place) it was the only idle one, so it was closed for the next
// stalled connection and its review failed with EOF. A second covers the
// API server's write and the server's read on a loaded replica; a
// connection still unused after it is parked, and gives its place as an
// idle keep-alive does.
const freshFor = time.Second

// handshakeGrace is how long a handshake under way keeps its place at the
// cap, where a connection waits for one: the API server's takes
// milliseconds, and closing it fails the review it was dialled for.
// Past three quarters of the cap, where nobody waits yet, it keeps its
// place for freshFor: new connections of one burst would otherwise close
// each other's handshakes.
const handshakeGrace = 100 * time.Millisecond

// idleTimeout is how long a connection may wait for its first request (as
// an idle keep-alive waits for its next one); zero leaves net/http's
// header timeout to time that wait.
func newLimitListener(l net.Listener, maxConns, perSource int, handshakeTimeout, idleTimeout time.Duration, open prometheus.Gauge, refused *prometheus.CounterVec, log logr.Logger) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, maxConns), open: open, refused: refused,
		perSource: perSource, idleCloseAt: maxConns * 3 / 4, handshakeTimeout: handshakeTimeout, idleTimeout: idleTimeout, log: log,
		bySource: map[string]int{}, conns: map[*limitedConn]struct{}{}, done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := l.place(); err != nil {
			_ = c.Close()
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

// place takes a place under the cap for a connection accepted and not yet
// served. At the cap a connection without a request in flight gives its
// place (makeRoom); with none, the connection waits for one to close, or
// for a fresh one to become a parked one that may give way, and the next
// connections wait in the kernel's backlog. Only a connection that is
// there is made room for: one in its handshake is not closed for a peer
// that may never come.
func (l *limitListener) place() error {
	for {
		select {
		case l.sem <- struct{}{}:
			return nil
		default:
		}
		var wake <-chan time.Time
		var timer *time.Timer
		if retry := l.makeRoom(); !retry.IsZero() {
			timer = time.NewTimer(time.Until(retry))
			wake = timer.C
		}
		var err error
		select {
		case l.sem <- struct{}{}:
		case <-wake:
			continue
		case <-l.done:
			err = net.ErrClosed
		}
		if timer != nil {
			timer.Stop()
		}
		return err
	}
}

// makeRoom closes the connection nearCapVictim picks at the cap, unless
// one closed early is still giving its place back. With nothing to close
// it returns when something may be picked (zero: not before a connection
// changes state).
func (l *limitListener) makeRoom() (retry time.Time) {
	l.mu.Lock()
	if l.closing > 0 {
		l.mu.Unlock()
		return time.Time{}
	}
	victim, retry := l.nearCapVictim(nil, time.Now(), handshakeGrace)
	reason := l.pick(victim)
	l.mu.Unlock()
	if victim != nil {
		l.closeEarly(victim, reason)
	}
	return retry
}

// pick marks victim (nil: none) as closing and names why it goes, for
// the metric. Called with mu held.
func (l *limitListener) pick(victim *limitedConn) (reason string) {
	if victim == nil {
		return ""
	}
	victim.closing = true
	l.closing++
	if !victim.handshakeFrom.IsZero() {
		return "handshake-near-cap"
	}
	return "idle-near-cap"
}

// admit counts c against its source. A source that holds its share
// already gets c in place of its longest-idle connection, which is closed;
// with none idle, admit returns nil. Past idleCloseAt it closes a
// connection that gives way near the cap (nearCapVictim).
//
// Refusing a source at its share while it had idle connections failed the
// API server's reviews during a certificate rotation: client-go keeps one
// transport, one pool of connections, per CA bundle, so when the bundle
// changes the API server dials a new pool while the old pool's keep-alives
// stay open and idle until its 90 s idle timeout (several rotations, or a
// bundle staged and then used, leave several pools). With the new pool's
// connections added, the address went past its share, and a connection
// closed before its handshake fails the review it was dialled for: the
// API server's transport retries no request on a fresh connection, and a
// fail-closed webhook refuses the object. A source's idle connections are
// not what it is dialling for: a pool dials only when it has no idle
// connection of its own, so they belong to other pools, an abandoned one
// after a rotation. The longest-idle goes first: a pool reuses its most
// recently idle connection first, so it is the one least likely to be
// taken at that moment. The source still holds at most its share (plus,
// for a moment, the connections being closed), so a peer gains nothing by
// it: it can only trade its own idle connections for new ones.
func (l *limitListener) admit(c net.Conn) *limitedConn {
	src := sourceOf(c.RemoteAddr())
	now := time.Now()
	l.mu.Lock()
	var victim *limitedConn
	var reason string
	if l.bySource[src] >= l.perSource {
		if victim = l.longestIdle(src, now); victim == nil {
			l.noteRefusal(src)
			l.mu.Unlock()
			l.refused.WithLabelValues("per-source").Inc()
			return nil
		}
		l.pick(victim)
		reason = "idle-per-source"
	}
	l.bySource[src]++
	lc := &limitedConn{Conn: c, l: l, source: src, handshakeFrom: now}
	if l.handshakeTimeout > 0 {
		lc.handshakeDeadline = now.Add(l.handshakeTimeout)
	}
	l.conns[lc] = struct{}{}
	// Past idleCloseAt, not counting the connections already giving their
	// place (room on its way): counted again, each newcomer of a flood
	// would close one more while the last were still closing, until all
	// but the newest were closing and the only candidate left was the API
	// server's connection.
	if victim == nil && len(l.conns)-l.closing > l.idleCloseAt {
		victim, _ = l.nearCapVictim(lc, now, freshFor)
		reason = l.pick(victim)
	}
	l.mu.Unlock()
	l.open.Inc()
	if victim != nil {
		l.closeEarly(victim, reason)
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

// longestIdle is the connection from source src idle the longest, not
// fresh (freshFor), or nil. Called with mu held.
func (l *limitListener) longestIdle(src string, now time.Time) *limitedConn {
	var victim *limitedConn
	for c := range l.conns {
		if c.source != src || c.closing || c.idleSince.IsZero() || c.fresh(now) {
			continue
		}
		if victim == nil || c.idleSince.Before(victim.idleSince) {
			victim = c
		}
	}
	return victim
}

// nearCapVictim picks the connection that gives its place to newcomer
// (nil: one still in the backlog) near the cap: one without a request in
// flight, of the source holding the most connections; of that source its
// longest-idle, else its oldest in a TLS handshake. Idle alone was not
// enough: a connection in its handshake was never idle, so sixteen
// addresses that opened connections and never sent a ClientHello held the
// whole cap, each place for the handshake's timeout, renewed at once, and
// the API server's connections waited in the backlog past their 5 s. The
// source holding the most gives way first, so a few peers' flood takes its
// places from the flood; the API server holds few connections, and what
// it holds near the cap is idle keep-alives it may reuse at any moment. A
// fresh connection (freshFor) is never picked: it is about to carry a
// review. Nor is a handshake under way for less than minHandshake
// (handshakeGrace). With nothing to pick, retry is when the first
// connection spared for its youth may be (zero: none). Called with mu held.
func (l *limitListener) nearCapVictim(newcomer *limitedConn, now time.Time, minHandshake time.Duration) (victim *limitedConn, retry time.Time) {
	spare := func(until time.Time) {
		if retry.IsZero() || until.Before(retry) {
			retry = until
		}
	}
	for c := range l.conns {
		if c == newcomer || c.closing {
			continue
		}
		switch {
		case !c.handshakeFrom.IsZero():
			if now.Sub(c.handshakeFrom) < minHandshake {
				spare(c.handshakeFrom.Add(minHandshake))
				continue
			}
		case c.idleSince.IsZero():
			continue // a request in flight, or on its way
		case c.fresh(now):
			spare(c.idleSince.Add(freshFor))
			continue
		}
		if victim == nil || l.givesWayBefore(c, victim) {
			victim = c
		}
	}
	if victim != nil {
		return victim, time.Time{}
	}
	return nil, retry
}

// givesWayBefore orders nearCapVictim's candidates: the source holding
// more connections first, then an idle connection before one in its
// handshake (a handshake may be the start of a review; an idle connection
// of the same source is what the source does not use), then the longer
// held. Called with mu held.
func (l *limitListener) givesWayBefore(a, b *limitedConn) bool {
	if na, nb := l.bySource[a.source], l.bySource[b.source]; na != nb {
		return na > nb
	}
	aIdle, bIdle := a.handshakeFrom.IsZero(), b.handshakeFrom.IsZero()
	switch {
	case aIdle && bIdle:
		return a.idleSince.Before(b.idleSince)
	case aIdle != bIdle:
		return aIdle
	default:
		return a.handshakeFrom.Before(b.handshakeFrom)
	}
}

// closeEarly closes the raw connection under a connection that gives its
// place: the server's read (of the next request, or of the handshake)
// fails and it ends the connection, as its own timeout would. The raw
// close sends no TLS alert, so it never waits on a peer that does not
// read. reason labels the metric.
func (l *limitListener) closeEarly(c *limitedConn, reason string) {
	l.refused.WithLabelValues(reason).Inc()
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
	if state == http.StateNew {
		return // still in its handshake (handshakeFrom)
	}
	lc.handshakeFrom = time.Time{}
	lc.waitingFirst = false
	if state == http.StateIdle {
		lc.idleSince = time.Now()
	} else {
		lc.idleSince = time.Time{}
	}
	lc.active = state == http.StateActive
	if lc.active {
		lc.first = firstServed // the handler's deadlines are its own
	}
}

// inFlight counts the open connections whose request the server has read
// and is handling (StateActive): those that cannot give their place.
func (l *limitListener) inFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for c := range l.conns {
		if c.active {
			n++
		}
	}
	return n
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
		if c.closing {
			l.closing--
		}
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
	// waitingFirst: idle while waiting for its first request, since the
	// end of its handshake. Guarded by l.mu.
	waitingFirst bool
	// handshakeFrom is when it was accepted, while its TLS handshake
	// runs; zero after. Guarded by l.mu.
	handshakeFrom time.Time
	// closing: picked to give its place, never picked again. Guarded by l.mu.
	closing bool
	// active: a request read and being handled (StateActive). Guarded by l.mu.
	active bool
	once   sync.Once
	// handshakeDeadline ends its handshake (zero: net/http's); set before
	// the server sees it.
	handshakeDeadline time.Time
	// The first request's wait (SetReadDeadline), in the server's goroutine.
	first        firstPhase
	headerBudget time.Duration
	waitFrom     time.Time
	shift        time.Duration
}

// fresh: it finished its handshake less than freshFor ago and has not
// sent its first request. Called with l.mu held.
func (c *limitedConn) fresh(now time.Time) bool {
	return c.waitingFirst && now.Sub(c.idleSince) < freshFor
}

// firstPhase is where a connection is on its way to its first request.
type firstPhase int

const (
	firstHandshake firstPhase = iota // the server runs the TLS handshake
	firstWaiting                     // handshake done, no request byte seen
	firstReading                     // the first request's headers
	firstServed                      // handled: net/http times the rest
)

// SetReadDeadline times the wait for a connection's first request.
// net/http times a connection's first request from the end of its TLS
// handshake with the header timeout (5 s), and every later one from its
// first byte, after waiting the idle timeout. The API server's transport
// dials connections during a burst and parks those it did not need in its
// idle pool, handshake done: the header timeout closed them while the
// transport took them for the next burst, and the review written into the
// closing connection failed with "write: broken pipe", not retried, a
// refused pod (docs/history/scale-rounds.md, sixth round). So a connection
// waits for its first request as long as a keep-alive waits for its next
// one, counted idle meanwhile (near the cap it gives its place first, as an
// idle keep-alive does, so unused connections lock nothing:
// TestUnusedConnectionsYieldAtTheCap); the
// header timeout, and net/http's whole-request deadline, which it computed
// from the start of the wait, start at the request's first byte instead.
// The handshake has its own deadline, handshakeDeadline: net/http would
// give it its shortest timeout, the header timeout, and a peer that never
// sends a ClientHello would hold its place that long. (A request whose first bytes came
// with the handshake's last ones, buffered by the *tls.Conn, and then
// stalled mid-headers is timed by the idle timeout and counted idle.)
//
// The calls net/http makes through the *tls.Conn: the handshake's
// deadline (replaced by handshakeDeadline), a zero one when the handshake
// is done, the first request's header deadline, its whole-request deadline
// once the headers are read; then StateActive (connState) ends the first
// request's phase.
func (c *limitedConn) SetReadDeadline(t time.Time) error {
	if c.first == firstHandshake {
		if t.IsZero() {
			c.first = firstWaiting
			c.handshakeDone()
		} else if !c.handshakeDeadline.IsZero() {
			t = c.handshakeDeadline
		}
		return c.Conn.SetReadDeadline(t)
	}
	if c.l.idleTimeout <= 0 {
		return c.Conn.SetReadDeadline(t)
	}
	switch c.first {
	case firstHandshake: // above
	case firstWaiting:
		switch {
		case c.waitFrom.IsZero() && !t.IsZero(): // the header deadline: wait instead
			now := time.Now()
			c.headerBudget, c.waitFrom = t.Sub(now), now
			c.markWaiting(now)
			return c.Conn.SetReadDeadline(now.Add(c.l.idleTimeout))
		case !c.waitFrom.IsZero():
			// Headers read with no Read here: the request came with the
			// handshake's last bytes, buffered by the *tls.Conn.
			c.startFirst(time.Now())
			if !t.IsZero() {
				t = t.Add(c.shift)
			}
		}
	case firstReading:
		if !t.IsZero() {
			t = t.Add(c.shift)
		}
	case firstServed:
	}
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline gives the handshake's writes its deadline too (net/http
// sets the same one for reading and writing).
func (c *limitedConn) SetWriteDeadline(t time.Time) error {
	if c.first == firstHandshake && !t.IsZero() && !c.handshakeDeadline.IsZero() {
		t = c.handshakeDeadline
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *limitedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.first == firstWaiting && !c.waitFrom.IsZero() {
		now := time.Now()
		c.startFirst(now)
		if derr := c.Conn.SetReadDeadline(now.Add(c.headerBudget)); derr != nil && err == nil {
			err = derr
		}
	}
	return n, err
}

// startFirst: the first request's bytes arrived at now; deadlines net/http
// computed from the start of the wait move by the wait.
func (c *limitedConn) startFirst(now time.Time) {
	c.first, c.shift = firstReading, now.Sub(c.waitFrom)
	c.markWaiting(time.Time{})
}

// markWaiting counts it idle, waiting for its first request, since since
// (zero: the request started).
func (c *limitedConn) markWaiting(since time.Time) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.idleSince, c.waitingFirst = since, !since.IsZero()
}

// handshakeDone: the TLS handshake is over; nearCapVictim takes it for an
// idle connection once it waits for its first request.
func (c *limitedConn) handshakeDone() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.handshakeFrom = time.Time{}
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
