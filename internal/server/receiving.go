package server

import (
	"context"
	"sync"
	"time"

	"github.com/trainguard/trainguard/webhook"
)

// receiveBudget bounds the buffers of bodies still arriving. A body is
// charged chunk by chunk as its bytes arrive, never for what its
// Content-Length merely promises: reserving the declared length let a
// client that then sent nothing hold up to 7 MiB of the budget for the
// whole body timeout, and every review queued behind it first come first
// served waited until its own 3 s were gone: 3 of 10 legitimate reviews
// were refused (TestStalledBodiesDoNotStarveReviews).
//
// Charging only what arrived could deadlock: bodies each holding part of
// the budget, all waiting for more. So one body at a time, the lane, may
// go past the shared pool, up to the rest of its own body; room for one
// maximum-size review is set aside for it, so memory stays bounded by the
// budget. The lane
// goes to a waiting body, preferring a source other than the last lane
// holder's, so one peer cannot keep it; and its holder must keep its bytes
// coming (laneDeadline) or lose it.
type receiveBudget struct {
	mu   sync.Mutex
	free int64
	// lane is the body that may overdraw; nil when none.
	lane *received
	// laneSource is the source of the last body given the lane.
	laneSource string
	waiting    map[*received]struct{}
	// wake is closed, and replaced, whenever room or the lane frees.
	wake chan struct{}
}

// newReceiveBudget shares size out: one maximum-size review's worth for the
// lane, the rest (at least nothing) as the pool every body charges first.
func newReceiveBudget(size int64) *receiveBudget {
	return &receiveBudget{free: max(size-webhook.MaxRequestBytes, 0), waiting: map[*received]struct{}{}, wake: make(chan struct{})}
}

// charge makes room for size more bytes of b, waiting until ctx ends if
// there is none; waited says it had to wait (the body's deadline then
// starts afresh: it waited for the server, not the other way round).
func (q *receiveBudget) charge(ctx context.Context, b *received, size int64) (waited bool, err error) {
	for {
		q.mu.Lock()
		switch {
		case q.lane == b:
			b.overdraft += size
			q.mu.Unlock()
			return waited, nil
		case q.free >= size:
			q.free -= size
			b.charged += size
			delete(q.waiting, b)
			q.mu.Unlock()
			return waited, nil
		case q.lane == nil && q.mayTakeLane(b):
			q.lane, q.laneSource = b, b.source
			b.overdraft += size
			delete(q.waiting, b)
			q.mu.Unlock()
			return true, nil
		}
		q.waiting[b] = struct{}{}
		wake := q.wake
		q.mu.Unlock()
		waited = true
		select {
		case <-wake:
		case <-ctx.Done():
			q.mu.Lock()
			delete(q.waiting, b)
			q.mu.Unlock()
			return true, errBusy
		}
	}
}

// mayTakeLane: the last lane holder's source waits its turn while a body
// from another source waits too. Called with mu held.
func (q *receiveBudget) mayTakeLane(b *received) bool {
	if b.source != q.laneSource {
		return true
	}
	for w := range q.waiting {
		if w.source != q.laneSource {
			return false
		}
	}
	return true
}

// release gives back everything b holds.
func (q *receiveBudget) release(b *received) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.free += b.charged
	b.charged, b.overdraft = 0, 0
	if q.lane == b {
		q.lane = nil
	}
	delete(q.waiting, b)
	close(q.wake)
	q.wake = make(chan struct{})
}

// holdsLane says whether b may overdraw.
func (q *receiveBudget) holdsLane(b *received) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lane == b
}

// laneMinRate is the rate a body must arrive at once it waited for room:
// its bytes are ready on a legitimate sender, who was only held back by
// TCP while the server did not read (64 Mbit/s; the API server writes a
// review in one go over a data-centre network).
const laneMinRate = 8 << 20 // bytes per second

// afterWait is how long a body that waited for room has for size more
// bytes: a quarter of the body timeout to resume, plus size at
// laneMinRate, and never more than the body timeout.
func afterWait(bodyTimeout time.Duration, size int64) time.Duration {
	d := bodyTimeout/2 + time.Duration(float64(size)/laneMinRate*float64(time.Second))
	return min(d, bodyTimeout)
}
