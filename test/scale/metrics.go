package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// series is one scrape of trainguard's /metrics: "name{labels}" -> value.
type series map[string]float64

func (e *env) scrape(ctx context.Context) (series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.tgMetrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping trainguard: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	s := series{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			s[line[:i]] = v
		}
	}
	return s, nil
}

// sum adds every series of name whose labels contain each of match
// (`label="value"` fragments).
func (s series) sum(name string, match ...string) float64 {
	t := 0.0
	for k, v := range s {
		base, labels, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(labels, m)
		}
		if ok {
			t += v
		}
	}
	return t
}

// writes is what trainguard's clients sent that changes state.
func (s series) writes() float64 {
	t := 0.0
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		t += s.sum("rest_client_requests_total", `method="`+m+`"`)
	}
	return t
}

func (s series) requests() float64 { return s.sum("rest_client_requests_total") }

func (s series) deletions(mode string) float64 {
	return s.sum("trainguard_rescheduler_pod_deletions_total", `mode="`+mode+`"`)
}

// actions are the pods trainguard evicted (grace kept or 0) and
// force-deleted between two scrapes.
func actions(s0, s1 series) (evicted, forced float64) {
	evicted = s1.deletions("evict") + s1.deletions("evict-now") - s0.deletions("evict") - s0.deletions("evict-now")
	return evicted, s1.deletions("force") - s0.deletions("force")
}

func (s series) allDeletions() float64 { return s.sum("trainguard_rescheduler_pod_deletions_total") }

// proc is a sample of a process's CPU time and memory from /proc.
type proc struct {
	at    time.Time
	cpu   time.Duration
	rssKB int64
	hwmKB int64
}

func sampleProc(pid int) (proc, error) {
	p := proc{at: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th fields, in clock ticks (100 per second on Linux).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	p.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			p.rssKB = kb
		case "VmHWM":
			p.hwmKB = kb
		}
	}
	return p, nil
}

func mib(kb int64) float64 { return float64(kb) / 1024 }
