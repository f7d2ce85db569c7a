package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/trainguard/trainguard/webhook"
)

// Chunk sizes of a body being received. The first is small, so a client
// that declares megabytes and sends a byte costs a few KiB; each next one
// doubles, so a 7 MiB review takes about fifteen reads and allocates at
// most about twice what arrived.
const (
	firstChunk = 4 << 10
	maxChunk   = 1 << 20
)

// received is a body read into memory, in the chunks it arrived in.
type received struct {
	chunks [][]byte
	n      int64
	// charged is what the chunks hold against the receiving budget, and
	// overdraft what they hold past it (the lane); guarded by the budget.
	charged, overdraft int64
	// source is the peer's address, for the lane's turns.
	source string
	// read is false when the body was left for the handler (over the cap).
	read bool
}

// receiveBody reads r's body under the body read timeout, charging every
// chunk to the receiving budget before allocating it. A body declared over
// the cap is not read: the handler refuses it from its Content-Length
// (413) without reading a byte. On error the charge is already released.
func (l *Limiter) receiveBody(ctx context.Context, w http.ResponseWriter, r *http.Request) (*received, int, error) {
	b := &received{source: hostOf(r.RemoteAddr)}
	if r.ContentLength > webhook.MaxRequestBytes {
		return b, 0, nil
	}
	l.arriving.Inc()
	defer l.arriving.Dec()
	rc := http.NewResponseController(w)
	// A recorder (unit tests) has no connection: nothing to time out.
	deadline := rc.SetReadDeadline(time.Now().Add(l.bodyTimeout)) == nil
	status, err := l.readChunks(ctx, rc, b, r)
	if err != nil {
		// The deadline stays: the server, finding the body unread, then
		// closes the connection instead of waiting to drain it.
		l.receiving.release(b)
		return nil, status, err
	}
	if deadline {
		// Lifted once the body is in: the server's background read would
		// otherwise hit the deadline and cancel the request's context while
		// it is handled. The write timeout still bounds the connection.
		_ = rc.SetReadDeadline(time.Time{})
	}
	b.read = true
	return b, 0, nil
}

// readChunks reads the body into b chunk by chunk until its end, its
// Content-Length, the cap or the deadline. Each chunk is charged before it
// is allocated (receiveBudget), waiting for room when there is none. A
// body that had to wait is paced from then on: each chunk must arrive
// within afterWait of its read, and the rest of the body within afterWait
// of the first wait, so a body that took the lane or freed room and then
// sends nothing gives it back within a fraction of the body timeout.
func (l *Limiter) readChunks(ctx context.Context, rc *http.ResponseController, b *received, r *http.Request) (int, error) {
	src := http.MaxBytesReader(nil, r.Body, webhook.MaxRequestBytes)
	var paceUntil time.Time // zero until the body first waits
	for size := int64(firstChunk); ; size = min(2*size, maxChunk) {
		if r.ContentLength >= 0 {
			size = min(size, r.ContentLength-b.n)
		}
		if size == 0 {
			return 0, nil
		}
		waited, err := l.receiving.charge(ctx, b, size)
		if err != nil {
			return http.StatusTooManyRequests, err
		}
		now := time.Now()
		if waited {
			paceUntil = now.Add(l.bodyTimeout)
		}
		if !paceUntil.IsZero() {
			d := now.Add(afterWait(l.bodyTimeout, size))
			if d.After(paceUntil) {
				d = paceUntil
			}
			_ = rc.SetReadDeadline(d)
		}
		buf := make([]byte, size)
		k, err := io.ReadFull(src, buf)
		b.chunks, b.n = append(b.chunks, buf[:k]), b.n+int64(k)
		switch {
		case (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && r.ContentLength < 0:
			return 0, nil // the end of a body of unknown length
		case err != nil:
			return bodyError(err, l.bodyTimeout, b.n, r.ContentLength)
		}
	}
}

// hostOf is the address part of a request's RemoteAddr.
func hostOf(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

// bodyError explains a body that did not arrive whole.
func bodyError(err error, timeout time.Duration, got, declared int64) (int, error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds the %d byte limit", webhook.MaxRequestBytes)
	}
	var timedOut interface{ Timeout() bool }
	if errors.As(err, &timedOut) && timedOut.Timeout() {
		return http.StatusRequestTimeout, fmt.Errorf("request body not received within %s (%d of %d bytes): %w", timeout, got, declared, err)
	}
	return http.StatusBadRequest, fmt.Errorf("reading request body (%d of %d bytes): %w", got, declared, err)
}

// chunkReader hands the handler a received body, dropping each chunk as it
// is consumed so the handler's own copy does not double the memory held.
type chunkReader struct{ chunks [][]byte }

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks[0] = nil
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

func (c *chunkReader) Close() error { c.chunks = nil; return nil }
