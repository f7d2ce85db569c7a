// Command goodput runs the goodput benchmark (docs/goodput.md):
// the example trainer in three arms side by side (trainguard, plain
// Kubernetes, Kueue's failure recovery) under a seeded chaos schedule; it
// prints the schedule and one table, and writes the progress curves as CSV
// for hack/goodput/plot.py. It needs only $KUBECONFIG, kubectl and a node
// hook (-hook).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trainguard/trainguard/test/goodput"
)

// exitCode is main's, set where a deferred cleanup must still run.
var exitCode int

func main() {
	defer func() { os.Exit(exitCode) }()
	seed := flag.Int64("seed", 1, "the chaos schedule's seed: the same seed gives the same schedule")
	duration := flag.Duration("duration", 30*time.Minute, "wall time of the measured window")
	interval := flag.Duration("interval", 3*time.Minute, "one disruption per interval (the first is left undisturbed)")
	repair := flag.Duration("repair", 5*time.Minute, "how long a crashed node stays dead before the hook restores it")
	kinds := flag.String("kinds", "", "comma-separated disruption kinds (default: all; with -short: the short form's)")
	short := flag.Bool("short", false, "the short form (make e2e's with -seed 3 -interval 3m): every kind of -kinds once, one per interval (ignores -duration)")
	scheduleOnly := flag.Bool("schedule-only", false, "print the schedule and exit")
	hook := flag.String("hook", "hack/cluster/goodput-hook.sh", "node hook: crash|restore|partition|heal NODE, claim NAMESPACE CLAIM")
	kubectl := flag.String("kubectl", "kubectl", "kubectl binary")
	image := flag.String("image", "localhost/pytorch:e2e", "trainer image (python3, torch, the SDK and examples/trainer at /opt/trainguard)")
	pull := flag.String("pull-policy", "IfNotPresent", "the trainer image's imagePullPolicy")
	claim := flag.String("claim", "tg-checkpoints", "the checkpoint claim each arm's namespace gets")
	prefix := flag.String("namespace-prefix", "goodput", "the arms' namespaces are PREFIX-trainguard, PREFIX-plain, PREFIX-kueue")
	stepDelay := flag.Float64("step-delay", 0.3, "seconds each training step sleeps (a fixed step time)")
	saveEvery := flag.Int("save-every", 20, "periodic checkpoint every N steps")
	out := flag.String("out", "bin/goodput", "directory for progress.csv, events.csv and table.md")
	keep := flag.Bool("keep", false, "leave the namespaces after the run")
	flag.Parse()

	ks, err := goodput.ParseKinds(*kinds)
	if err != nil {
		fail(err)
	}
	var evs []goodput.Event
	if *short {
		if *kinds == "" {
			ks = goodput.ShortKinds
		}
		evs = goodput.Short(*seed, *interval, ks)
	} else if evs, err = goodput.Schedule(*seed, *duration, *interval, ks); err != nil {
		fail(err)
	}
	fmt.Print(goodput.Format(*seed, evs))
	if *scheduleOnly {
		return
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fail(fmt.Errorf("kubeconfig ($KUBECONFIG): %w", err))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	c := goodput.Config{
		Kubectl: *kubectl, Hook: *hook, Image: *image, PullPolicy: *pull, Claim: *claim,
		Arms: goodput.Arms(*prefix), Events: evs, Interval: *interval, Repair: *repair,
		StepDelay: *stepDelay, SaveEvery: *saveEvery,
	}
	if !*short {
		c.Duration = *duration
	}
	r := goodput.New(c, kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg))
	if !*keep {
		defer r.Cleanup(context.Background())
	}
	load := sampleLoad(ctx)
	res, err := r.Run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goodput:", err)
		exitCode = 2 // after the cleanup
		return
	}
	table := fmt.Sprintf("goodput, seed %d, interval %s, step delay %gs, checkpoint every %d steps, %s\n%s\n%s",
		*seed, *interval, *stepDelay, *saveEvery, res.Start.UTC().Format("2006-01-02 15:04 MST"), load(), res.Table())
	fmt.Print(table)
	progress, events := res.CSV()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for name, body := range map[string]string{"progress.csv": progress, "events.csv": events, "table.md": goodput.Format(*seed, evs) + table} {
		if err := os.WriteFile(filepath.Join(*out, name), []byte(body), 0o644); err != nil {
			fail(err)
		}
	}
	fmt.Printf("wrote %s/{progress,events}.csv and table.md\n", *out)
	if len(res.Corrupt) > 0 {
		fmt.Fprintln(os.Stderr, "goodput: training state not consistent (see the table)")
		exitCode = 1
	}
}

// sampleLoad reads this machine's 1-minute load average every 30 s until
// ctx ends; the function it returns says what it saw. A run's figures mean
// little on a machine busy with other work: the reader should see it.
func sampleLoad(ctx context.Context) func() string {
	var mu sync.Mutex
	var seen []float64
	read := func() {
		b, err := os.ReadFile("/proc/loadavg")
		if err != nil {
			return
		}
		var v float64
		if _, err := fmt.Sscanf(string(b), "%f", &v); err == nil {
			mu.Lock()
			seen = append(seen, v)
			mu.Unlock()
		}
	}
	read()
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return "load average: not readable here (/proc/loadavg)"
		}
		s := slices.Sorted(slices.Values(seen))
		return fmt.Sprintf("load average (1 min, this machine, %d cores, %d samples 30 s apart): min %.1f, median %.1f, max %.1f",
			runtime.NumCPU(), len(s), s[0], s[len(s)/2], s[len(s)-1])
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "goodput:", err)
	os.Exit(2)
}
