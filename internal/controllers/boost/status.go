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
func HTTPFetcher() Fetcher {
	c := &http.Client{
		Timeout:   statusTimeout,
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, MaxResponseHeaderBytes: 4096},
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
