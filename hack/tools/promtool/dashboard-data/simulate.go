package main

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
)

const ns = "trainguard-system"

// sim holds the cumulative value of every synthetic series.
type sim struct {
	rng    *rand.Rand
	values map[string]float64
	labels map[string]labels.Labels
}

func (s *sim) add(name string, v float64, kv ...string) {
	lbls := labels.FromStrings(append([]string{"__name__", name, "namespace", ns}, kv...)...)
	key := lbls.String()
	s.labels[key] = lbls
	s.values[key] += v
}

func (s *sim) set(name string, v float64, kv ...string) {
	lbls := labels.FromStrings(append([]string{"__name__", name, "namespace", ns}, kv...)...)
	key := lbls.String()
	s.labels[key] = lbls
	s.values[key] = v
}

// observe adds one observation to a histogram's _bucket, _sum and _count.
func (s *sim) observe(name string, buckets []float64, v float64, kv ...string) {
	for _, le := range buckets {
		inc := 0.0
		if v <= le {
			inc = 1
		}
		s.add(name+"_bucket", inc, append(kv, "le", fmt.Sprint(le))...)
	}
	s.add(name+"_bucket", 1, append(kv, "le", "+Inf")...)
	s.add(name+"_sum", v, kv...)
	s.add(name+"_count", 1, kv...)
}

func (s *sim) poisson(mean float64) int {
	n, l, p := 0, math.Exp(-mean), 1.0
	for {
		p *= s.rng.Float64()
		if p <= l {
			return n
		}
		n++
	}
}

var (
	admissionBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1}
	durationBuckets  = []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}
	bytesBuckets     = func() []float64 {
		var b []float64
		for v := float64(1 << 20); len(b) < 11; v *= 4 {
			b = append(b, v)
		}
		return b
	}()
)

// minute simulates one minute of a busy cluster: a daily load curve, a
// node failure at 09:00 (reschedules, checkpoints), a slow spell at 14:00
// and a webhook outage at 16:30.
func (s *sim) minute(t time.Time) {
	hour := float64(t.Hour()) + float64(t.Minute())/60
	load := 0.6 + 0.4*math.Sin((hour-6)/24*2*math.Pi)
	nodeFailure := hour >= 9 && hour < 9.5
	outage := hour >= 16.5 && hour < 16.75
	pods := s.poisson(6 * load)
	if nodeFailure {
		pods += s.poisson(8)
	}
	for i := 0; i < pods && !outage; i++ {
		s.add("trainguard_admission_decisions_total", 1, "webhook", "mutate-pod", "decision", "patched")
		s.add("trainguard_admission_decisions_total", 1, "webhook", "validate-pod", "decision", "allowed")
		lat := 0.0008 * math.Exp(s.rng.NormFloat64()*0.6)
		if hour >= 14 && hour < 15 {
			lat *= 20
		}
		s.observe("trainguard_admission_duration_seconds", admissionBuckets, lat, "webhook", "mutate-pod")
		s.observe("trainguard_admission_duration_seconds", admissionBuckets, lat/3, "webhook", "validate-pod")
	}
	for i := s.poisson(0.3 * load); i > 0 && !outage; i-- {
		s.add("trainguard_admission_decisions_total", 1, "webhook", "mutate-pytorchjob", "decision", "patched")
		s.add("trainguard_admission_decisions_total", 1, "webhook", "validate-pytorchjob", "decision", "allowed")
	}
	if s.rng.Float64() < 0.01 {
		s.add("trainguard_admission_decisions_total", 1, "webhook", "validate-pytorchjob", "decision", "denied")
	}
	if outage {
		s.add("apiserver_admission_webhook_rejection_count", float64(s.poisson(40)), "name", "pods.mutate.trainguard.io", "error_type", "calling_webhook_error")
	} else {
		s.add("apiserver_admission_webhook_rejection_count", 0, "name", "pods.mutate.trainguard.io", "error_type", "calling_webhook_error")
	}
	s.add("apiserver_admission_webhook_fail_open_count", 0, "name", "pods.mutate.trainguard.io")
	s.checkpoints(load, nodeFailure)
	s.set("trainguard_rescheduler_brake_engaged", 0)
}

func (s *sim) checkpoints(load float64, nodeFailure bool) {
	stops := s.poisson(0.4 * load)
	if nodeFailure {
		stops += s.poisson(5)
	}
	// Three training namespaces, as Prometheus stores them: the pod's
	// namespace label renamed exported_namespace. team-c's trainers are slow
	// to checkpoint (more timeouts).
	tenants := []string{"team-a", "team-b", "team-c"}
	for _, tenant := range tenants {
		for _, o := range []string{"saved", "timeout", "no-trainer", "failed"} {
			for _, c := range []string{"preemption", "eviction", "node-lost", "suspension", "deletion", "unknown"} {
				s.add("trainguard_checkpoint_total", 0, "exported_namespace", tenant, "cause", c, "outcome", o)
			}
		}
	}
	s.add("trainguard_rescheduler_bad_nodes_recorded_total", 0)
	for i := 0; i < stops; i++ {
		tenant := tenants[s.rng.Intn(len(tenants))]
		outcome, secs := "saved", 8*math.Exp(s.rng.NormFloat64()*0.4)
		timeouts := 0.04
		if tenant == "team-c" {
			timeouts = 0.15
		}
		switch r := s.rng.Float64(); {
		case r < timeouts:
			outcome, secs = "timeout", 60
		case r < timeouts+0.02:
			outcome, secs = "no-trainer", 0.2
		}
		cause := "preemption" // Kueue and the scheduler make room most of the day
		switch r := s.rng.Float64(); {
		case nodeFailure && r < 0.7:
			cause = "eviction" // the rescheduler drains the failing node
		case nodeFailure:
			cause = "node-lost"
		case r < 0.3:
			cause = "eviction"
		case r < 0.4:
			cause = "deletion"
		}
		lbls := []string{"exported_namespace", tenant, "cause", cause, "outcome", outcome}
		s.add("trainguard_checkpoint_total", 1, lbls...)
		s.observe("trainguard_checkpoint_duration_seconds", durationBuckets, secs, lbls...)
		if outcome == "saved" {
			s.observe("trainguard_checkpoint_bytes", bytesBuckets, 3.2e9*math.Exp(s.rng.NormFloat64()*0.3))
		}
		if nodeFailure {
			s.add("trainguard_rescheduler_decisions_total", 1, "reason", "NodeDrained")
			s.add("trainguard_rescheduler_decisions_total", 1, "reason", "GracefulDelete")
			s.add("trainguard_rescheduler_pod_deletions_total", 1, "mode", "graceful")
		}
	}
	if nodeFailure && s.rng.Float64() < 0.1 {
		s.add("trainguard_rescheduler_bad_nodes_recorded_total", 1)
	}
	if s.rng.Float64() < 0.02 {
		s.add("trainguard_rescheduler_decisions_total", 1, "reason", "RetryableExit")
		s.add("trainguard_rescheduler_decisions_total", 1, "reason", "GracefulDelete")
		s.add("trainguard_rescheduler_pod_deletions_total", 1, "mode", "graceful")
	}
	if s.rng.Float64() < 0.005 {
		s.add("trainguard_rescheduler_decisions_total", 1, "reason", "PermanentFailure")
	}
}

// simulate writes one sample per series per minute between start and end.
func simulate(db *tsdb.DB, start, end time.Time) error {
	s := &sim{rng: rand.New(rand.NewSource(14)), values: map[string]float64{}, labels: map[string]labels.Labels{}}
	for t := start; !t.After(end); t = t.Add(time.Minute) {
		s.minute(t)
		app := db.Appender(context.Background())
		keys := make([]string, 0, len(s.values))
		for k := range s.values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, err := app.Append(0, s.labels[k], t.UnixMilli(), s.values[k]); err != nil {
				return err
			}
		}
		if err := app.Commit(); err != nil {
			return err
		}
	}
	return nil
}
