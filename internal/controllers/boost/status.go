package boost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/strictjson"
)

// Status is one trainer's answer on its status endpoint
// (sdk/python/trainguard/_status.py). Every field is the tenant's.
type Status struct {
	Format        int      `json:"format"`
	Now           float64  `json:"now"`
	Step          int64    `json:"step"`
	CommittedStep *int64   `json:"committed_step"`
	CommittedAt   *float64 `json:"committed_at"`
	SaveSeconds   *float64 `json:"save_seconds"`
}

// Bounds on what is read: the SDK's answer is about 150 bytes.
const (
	maxStatusBytes = 1024
	statusTimeout  = 2 * time.Second
	maxStep        = 1 << 53 // what the SDK's JSON (a float in other readers) holds exactly
	maxSeconds     = 86400   // a save longer than a day is garbage
	// maxAge: a commit older than a year is as good as none.
	maxAge = 365 * 86400
)

// ParseStatus decodes and checks a status body: strict JSON, one object,
// known fields, finite times, steps in range. Times are the trainer's own
// clock: only differences between them are used, so a skewed node clock
// does not matter.
func ParseStatus(body []byte) (Status, error) {
	if len(body) > maxStatusBytes {
		return Status{}, fmt.Errorf("status is more than %d bytes", maxStatusBytes)
	}
	var s Status
	if err := strictjson.DecodeOne(bytes.NewReader(body), &s); err != nil {
		return Status{}, fmt.Errorf("status: %w", err)
	}
	switch {
	case s.Format != 1:
		return Status{}, fmt.Errorf("status format %d, want 1", s.Format)
	case !finite(s.Now) || s.Now <= 0:
		return Status{}, errors.New("status now is not a positive time")
	case s.Step < 0 || s.Step > maxStep:
		return Status{}, fmt.Errorf("status step %d out of range", s.Step)
	case (s.CommittedStep == nil) != (s.CommittedAt == nil):
		return Status{}, errors.New("status has committed_step without committed_at or the reverse")
	}
	if s.CommittedStep != nil {
		if *s.CommittedStep < 0 || *s.CommittedStep > maxStep {
			return Status{}, fmt.Errorf("status committed_step %d out of range", *s.CommittedStep)
		}
		if a := *s.CommittedAt; !finite(a) || a <= 0 || a > s.Now+5 {
			return Status{}, errors.New("status committed_at is not a time before now")
		}
	}
	if v := s.SaveSeconds; v != nil && (!finite(*v) || *v < 0 || *v > maxSeconds) {
		return Status{}, fmt.Errorf("status save_seconds %v out of range [0, %d]", *v, maxSeconds)
	}
	return s, nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Since returns the seconds and steps since the last commit (false: none).
func (s Status) Since() (seconds float64, steps int64, ok bool) {
	if s.CommittedAt == nil {
		return 0, 0, false
	}
	return min(max(s.Now-*s.CommittedAt, 0), maxAge), max(s.Step-*s.CommittedStep, 0), true
}

// Fetcher reads a pod's status endpoint.
type Fetcher func(ctx context.Context, podIP string) (Status, error)

// HTTPFetcher reads http://podIP:StatusPort/trainguard/status: no proxy,
// no redirect, a short timeout, a bounded body. podIP is the kubelet's
// (status.podIP), never a name a tenant wrote.
func HTTPFetcher() Fetcher { return httpFetcher((&net.Dialer{}).DialContext) }

// httpFetcher is HTTPFetcher dialling with dial: the tests point pod IPs
// at local listeners through it and keep the rest of the real path.
func httpFetcher(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Fetcher {
	c := &http.Client{
		Timeout:   statusTimeout,
		Transport: &http.Transport{Proxy: nil, DialContext: dial, DisableKeepAlives: true, MaxResponseHeaderBytes: 4096},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return func(ctx context.Context, podIP string) (Status, error) {
		if net.ParseIP(podIP) == nil {
			return Status{}, fmt.Errorf("pod IP %q is not an IP", podIP)
		}
		url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(contract.StatusPort)) + contract.StatusPath
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return Status{}, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return Status{}, err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return Status{}, fmt.Errorf("status endpoint answered %s", resp.Status)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes+1))
		if err != nil {
			return Status{}, err
		}
		return ParseStatus(body)
	}
}

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
func readStatus(ctx context.Context, fetch Fetcher, ips []string) (best *Status, errs []error) {
	errs = make([]error, len(ips))
	if len(ips) == 0 {
		return nil, errs
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	type answer struct {
		i   int
		st  Status
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
