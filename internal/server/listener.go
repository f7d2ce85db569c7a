package server

import (
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// limitListener accepts at most max connections at once: past that, Accept
// waits until one closes, and new clients wait in the kernel's backlog.
// Every open connection costs its TLS state and read and write buffers
// (about 25 KiB); without a cap about ten thousand idle keep-alive
// connections, which cost an attacker nothing, reach the chart's memory
// limit. The cap protects memory; who may connect at all is the
// NetworkPolicy's business.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	open prometheus.Gauge
	// done unblocks a waiting Accept when the listener closes.
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, maxConns int, open prometheus.Gauge) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, maxConns), open: open, done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	l.open.Inc()
	return &limitedConn{Conn: c, release: func() { l.open.Dec(); <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn gives its place back once, however often it is closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
