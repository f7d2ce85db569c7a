package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Options are the sizes and settings of one run (make scale's flags).
type Options struct {
	Nodes, Zones                  int
	TrainingPods, Jobs, OtherPods int
	// Namespaces is how many tenant namespaces share the jobs.
	Namespaces int
	// Clients creating objects at once.
	Clients int
	// Bursts is the admission comparison's rounds: 64 pods at once in
	// each setup (AdmissionReport) per round.
	Bursts int
	// Steady is the steady-state measuring window.
	Steady time.Duration
	// Churn and ChurnPercent: how long training pods fail with exit 137,
	// and what share of them per minute.
	Churn        time.Duration
	ChurnPercent float64
	// LeaseSeconds is the node Lease duration KWOK writes; trainguard's
	// --lease-lost-after and --force-delete-after are set to it when it is
	// not the kubelet's 40 s (the smoke run shortens it), and are the
	// shipped defaults (25 s) when it is.
	LeaseSeconds int
	// TrainguardFlags are added to the chart's arguments of every
	// trainguard start (printed at the top of the run): a setting a cluster
	// of this size would change, e.g. the leader election's timing.
	TrainguardFlags []string
	// MemoryLimit replaces the chart's memory limit (GOMEMLIMIT follows
	// it, as in the chart), e.g. "384Mi": the chart's sizing guidance for
	// 50,000 managed pods (values.yaml, resources). Empty: the chart's.
	MemoryLimit string
	// Scenarios to run, in this order: steady, churn, outage, stall,
	// outage-nobrake.
	Scenarios []string
	WorkDir   string
	Out       io.Writer
}

// Defaults are issue 34's sizes: 5,000 nodes in 10 zones, 50,000 training
// pods in 2,000 jobs and 10,000 other pods.
func Defaults() Options {
	return Options{Nodes: 5000, Zones: 10, TrainingPods: 50000, Jobs: 2000, OtherPods: 10000, Namespaces: 20, Clients: 16,
		Bursts: 10, Steady: 60 * time.Second, Churn: 3 * time.Minute, ChurnPercent: 1, LeaseSeconds: 40,
		Scenarios: []string{"steady", "churn", "outage", "stall", "outage-nobrake"}, Out: os.Stdout}
}

// Report is every figure of a run (written as report.json too).
type Report struct {
	Nodes, Zones, TrainingPods, Jobs, OtherPods, ManagedPods int
	Started                                                  time.Time
	CreateSeconds, RunningSeconds                            float64
	// ActionsDuringSetup counts pods evicted or deleted while the cluster
	// was healthy (a Lease renewal late under load, for instance).
	ActionsDuringSetup float64
	Steady             *SteadyReport    `json:",omitempty"`
	Admission          *AdmissionReport `json:",omitempty"`
	Churn              *ChurnReport     `json:",omitempty"`
	Outage             *OutageReport    `json:",omitempty"`
	Stall              *StallReport     `json:",omitempty"`
	OutageNoBrake      *OutageReport    `json:",omitempty"`
	TotalSeconds       float64
}

// Run brings the environment up, runs the scenarios and tears it down.
func Run(ctx context.Context, o Options) (*Report, error) {
	ctrl.SetLogger(logr.Discard())
	if o.WorkDir == "" {
		dir, err := os.MkdirTemp("", "trainguard-scale-")
		if err != nil {
			return nil, err
		}
		o.WorkDir = dir
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil { // -workdir may name a new directory
		return nil, err
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	r := &Report{Nodes: o.Nodes, Zones: o.Zones, TrainingPods: o.TrainingPods / o.Jobs * o.Jobs, Jobs: o.Jobs, OtherPods: o.OtherPods, Started: time.Now()}
	if len(o.TrainguardFlags) > 0 {
		fmt.Fprintf(o.Out, "== trainguard runs with the chart's arguments and %s\n", strings.Join(o.TrainguardFlags, " "))
	}
	fmt.Fprintf(o.Out, "== trainguard scale run: %d nodes in %d zones, %d training pods in %d jobs (%d namespaces), %d other pods; logs in %s\n",
		o.Nodes, o.Zones, r.TrainingPods, o.Jobs, o.Namespaces, o.OtherPods, o.WorkDir)
	e, err := startEnv(ctx, o)
	if e != nil {
		defer e.stop()
	}
	if err != nil {
		return r, err
	}
	if err := e.run(ctx, r); err != nil {
		e.tg.DumpLog(o.Out)
		return r, err
	}
	r.TotalSeconds = time.Since(r.Started).Seconds()
	fmt.Fprintf(o.Out, "== total %s\n", time.Since(r.Started).Round(time.Second))
	return r, writeReport(o.WorkDir, r)
}

// writeReport writes report.json; the run writes it after every scenario
// too, so a long run stopped early keeps the figures it reached.
func writeReport(dir string, r *Report) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.json"), data, 0o644)
}

func (e *env) run(ctx context.Context, r *Report) error {
	empty, err := e.heap(ctx)
	if err != nil {
		return err
	}
	if err := e.createNamespaces(ctx); err != nil {
		return err
	}
	t := time.Now()
	if err := e.createNodes(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "  %d nodes created in %s\n", e.o.Nodes, time.Since(t).Round(time.Second))
	time.Sleep(10 * time.Second)
	withNodes, err := e.heap(ctx)
	if err != nil {
		return err
	}
	d, err := e.createWorkload(ctx)
	if err != nil {
		return err
	}
	r.CreateSeconds = d.Seconds()
	w, err := e.waitRunning(ctx, r.TrainingPods+e.o.OtherPods, 30*time.Minute)
	if err != nil {
		return fmt.Errorf("waiting for KWOK to run every pod: %w", err)
	}
	r.RunningSeconds = w.Seconds()
	fmt.Fprintf(e.out, "  every pod Running %s after the last create\n", w.Round(time.Second))
	managed, err := e.managedPods(ctx)
	if err != nil {
		return err
	}
	r.ManagedPods = len(managed)
	if r.ManagedPods != r.TrainingPods {
		return fmt.Errorf("%d training pods but %d labelled managed: the webhook did not inject them all", r.TrainingPods, r.ManagedPods)
	}
	s, err := e.scrape(ctx)
	if err != nil {
		return err
	}
	r.ActionsDuringSetup = s.allDeletions()
	fmt.Fprintf(e.out, "  pods evicted or deleted by trainguard while every node was healthy: %.0f\n", r.ActionsDuringSetup)
	for _, s := range e.o.Scenarios {
		fmt.Fprintf(e.out, "-- %s\n", s)
		switch s {
		case "steady":
			if r.Steady, err = e.steady(ctx, empty, withNodes, r.ManagedPods); err != nil {
				return err
			}
			if r.Admission, err = e.admission(ctx); err != nil {
				return err
			}
		case "churn":
			if r.Churn, err = e.churn(ctx); err != nil {
				return err
			}
		case "outage":
			if r.Outage, err = e.outage(ctx, true); err != nil {
				return err
			}
		case "stall":
			if r.Stall, err = e.stall(ctx); err != nil {
				return err
			}
		case "outage-nobrake":
			if r.OutageNoBrake, err = e.outage(ctx, false); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown scenario %q", s)
		}
		r.TotalSeconds = time.Since(r.Started).Seconds()
		if err := writeReport(e.o.WorkDir, r); err != nil {
			return err
		}
	}
	return nil
}
