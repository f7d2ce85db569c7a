package boost

import (
	"context"
	"errors"
	"fmt"

	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
)

// statusTimeout bounds one Workload's reads of its pods in all.
const statusTimeout = trainerstatus.Timeout

// maxConcurrentReads bounds the status reads in flight for one Workload: a
// job of a thousand pods is not a thousand connections at once. Any pod's
// answer will do, so the pods beyond it are read only as earlier reads end.
const maxConcurrentReads = 16

// errAnswered is the error of a pod left unread (or whose read was
// cancelled) because another pod's answer was already all that was needed.
var errAnswered = errors.New("not read: another pod answered")

// readStatus reads the trainer's status from the pods at ips, at most
// maxConcurrentReads at a time, all under one statusTimeout. The pods are
// the tenant's: read one after another, 2 s each, eight that accepted and
// never answered took one reconcile 16 s, and the controller's two workers
// are every tenant's boosts and every evicted Workload's boost removal. It
// returns the best answer (nil: none), global rank 0's (the one with a save
// time) over the others, and stops at the first such answer, cancelling
// the reads still in flight; without one it takes what answered by the
// deadline. errs[i] is why ips[i] gave no answer (nil: it answered).
func readStatus(ctx context.Context, fetch trainerstatus.Fetcher, ips []string) (best *trainerstatus.Status, errs []error) {
	errs = make([]error, len(ips))
	if len(ips) == 0 {
		return nil, errs
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	type answer struct {
		i   int
		st  trainerstatus.Status
		err error
	}
	// Buffered for every pod: a read that ends after readStatus returned
	// never blocks, and its goroutine ends with it.
	answers := make(chan answer, len(ips))
	next := make(chan int)
	for range min(len(ips), maxConcurrentReads) {
		go func() {
			for i := range next {
				if err := ctx.Err(); err != nil {
					answers <- answer{i: i, err: err}
					continue
				}
				st, err := fetch(ctx, ips[i])
				answers <- answer{i: i, st: st, err: err}
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range ips {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	answered := make([]bool, len(ips))
	finish := func(why error) {
		for i := range errs {
			if !answered[i] && errs[i] == nil {
				errs[i] = why
			}
		}
	}
	for pending := len(ips); pending > 0; pending-- {
		select {
		case a := <-answers:
			if a.err != nil {
				errs[a.i] = a.err
				continue
			}
			answered[a.i] = true
			if best == nil || (best.SaveSeconds == nil && a.st.SaveSeconds != nil) {
				st := a.st
				best = &st
			}
			if best.SaveSeconds != nil {
				finish(errAnswered)
				return best, errs
			}
		case <-ctx.Done():
			finish(fmt.Errorf("no answer within %s: %w", statusTimeout, ctx.Err()))
			return best, errs
		}
	}
	return best, errs
}
