// Package trainerstatus speaks to a trainer's status port
// (sdk/python/trainguard/_status.py): its work-at-risk status, read by the
// priority-boost controller, and its checkpoint-now request, sent before a
// node's fault. Everything a trainer answers is the tenant's: read as
// hostile input, bounded in size and time.
package trainerstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/strictjson"
)

// Status is one trainer's answer on its status endpoint. Every field is the
// tenant's.
type Status struct {
	Format        int      `json:"format"`
	Now           float64  `json:"now"`
	Step          int64    `json:"step"`
	CommittedStep *int64   `json:"committed_step"`
	CommittedAt   *float64 `json:"committed_at"`
	SaveSeconds   *float64 `json:"save_seconds"`
}

// Timeout bounds one request to a trainer, connection to body: the SDK's
// own deadline per connection (TRAINGUARD_STATUS_TIMEOUT) is the same.
const Timeout = 2 * time.Second

// Bounds on what is read: the SDK's status is about 150 bytes, its other
// answers less.
const (
	maxStatusBytes = 1024
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

// Dial opens a connection; the tests route pod IPs to local listeners
// through it and keep the rest of the real path.
type Dial func(ctx context.Context, network, addr string) (net.Conn, error)

// client is the one HTTP client of a trainer's port: no proxy, no
// redirect, no keep-alive, a short timeout, a bounded head.
func client(dial Dial) *http.Client {
	return &http.Client{
		Timeout:   Timeout,
		Transport: &http.Transport{Proxy: nil, DialContext: dial, DisableKeepAlives: true, MaxResponseHeaderBytes: 4096},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// url is podIP's status port at path. podIP is the kubelet's
// (status.podIP), never a name a tenant wrote: anything else is refused.
func url(podIP, path string) (string, error) {
	if net.ParseIP(podIP) == nil {
		return "", fmt.Errorf("pod IP %q is not an IP", podIP)
	}
	return "http://" + net.JoinHostPort(podIP, strconv.Itoa(contract.StatusPort)) + path, nil
}

// Fetcher reads a pod's status endpoint.
type Fetcher func(ctx context.Context, podIP string) (Status, error)

// HTTPFetcher reads http://podIP:StatusPort/trainguard/status.
func HTTPFetcher() Fetcher { return HTTPFetcherVia((&net.Dialer{}).DialContext) }

// HTTPFetcherVia is HTTPFetcher dialling with dial.
func HTTPFetcherVia(dial Dial) Fetcher {
	c := client(dial)
	return func(ctx context.Context, podIP string) (Status, error) {
		u, err := url(podIP, contract.StatusPath)
		if err != nil {
			return Status{}, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
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

// Ack is a trainer's acceptance of a checkpoint-now request: the job will
// commit Step or a later step and train on. The caller polls the status
// until CommittedStep >= Step; a trainer that never gets there is to be
// reported, never stopped.
type Ack struct{ Step int64 }

// Requester asks the trainer at podIP to commit its next completed step
// and go on training; reason is logged by the trainer (sanitised, bounded).
type Requester func(ctx context.Context, podIP, reason string) (Ack, error)

// ErrRateLimited is a trainer's 429: it accepted a checkpoint-now request
// less than its TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL (default 30s) ago,
// and the job commits at most one such checkpoint per interval.
var ErrRateLimited = errors.New("the trainer accepts one checkpoint-now request per TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL")

// MaxReason is how much of a reason is sent (and the SDK keeps): printable
// ASCII, so the body stays far below the SDK's 1 KiB bound.
const MaxReason = 200

// HTTPRequester POSTs {"format":1,"reason":...} to
// http://podIP:StatusPort/trainguard/checkpoint, with the fetcher's port,
// timeout and dialling rules.
func HTTPRequester() Requester { return HTTPRequesterVia((&net.Dialer{}).DialContext) }

// HTTPRequesterVia is HTTPRequester dialling with dial.
func HTTPRequesterVia(dial Dial) Requester {
	c := client(dial)
	return func(ctx context.Context, podIP, reason string) (Ack, error) {
		u, err := url(podIP, contract.CheckpointNowPath)
		if err != nil {
			return Ack{}, err
		}
		body, err := json.Marshal(struct {
			Format int    `json:"format"`
			Reason string `json:"reason"`
		}{1, Sanitize(reason)})
		if err != nil {
			return Ack{}, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return Ack{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return Ack{}, err
		}
		defer func() { _ = resp.Body.Close() }()
		answer, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes+1))
		if err != nil {
			return Ack{}, err
		}
		switch resp.StatusCode {
		case http.StatusAccepted:
			return parseAck(answer)
		case http.StatusTooManyRequests:
			if after, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && after > 0 && after <= 86400 {
				return Ack{}, fmt.Errorf("%w: retry in %ds", ErrRateLimited, after)
			}
			return Ack{}, ErrRateLimited
		default:
			return Ack{}, fmt.Errorf("checkpoint-now request answered %s%s", resp.Status, trainerError(answer))
		}
	}
}

// parseAck decodes a 202's body: strict JSON {"format":1,"step":N}.
func parseAck(body []byte) (Ack, error) {
	if len(body) > maxStatusBytes {
		return Ack{}, fmt.Errorf("checkpoint-now answer is more than %d bytes", maxStatusBytes)
	}
	var a struct {
		Format int    `json:"format"`
		Step   *int64 `json:"step"`
	}
	if err := strictjson.DecodeOne(bytes.NewReader(body), &a); err != nil {
		return Ack{}, fmt.Errorf("checkpoint-now answer: %w", err)
	}
	switch {
	case a.Format != 1:
		return Ack{}, fmt.Errorf("checkpoint-now answer format %d, want 1", a.Format)
	case a.Step == nil:
		// A step of 0 would read as acknowledged by any status.
		return Ack{}, errors.New("checkpoint-now answer has no step")
	case *a.Step < 0 || *a.Step > maxStep:
		return Ack{}, fmt.Errorf("checkpoint-now answer step %d out of range", *a.Step)
	}
	return Ack{Step: *a.Step}, nil
}

// trainerError is the SDK's {"error": ...} of a refusal, sanitised, for
// the caller's message; "" when the body says nothing readable.
func trainerError(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		return ""
	}
	return ": " + Sanitize(e.Error)
}

// Sanitize keeps at most MaxReason characters of s, each printable ASCII
// (anything else becomes '?'), as the SDK does.
func Sanitize(s string) string {
	var b strings.Builder
	for i, r := range []rune(s) {
		if i == MaxReason {
			break
		}
		if r < ' ' || r > '~' {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}
