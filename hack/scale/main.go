// Command scale is `make scale` (docs/scale.md): trainguard on a simulated
// cluster (KWOK nodes and pods, a real kube-apiserver and etcd, the real
// trainguard binary with the chart's configuration), each scenario printing
// its figures. Sizes are flags; the pod counts follow -nodes unless given
// (10 training pods and 2 other pods per node, 25 pods per job: the defaults
// are 5,000 nodes, 50,000 training pods in 2,000 jobs, 10,000 other pods).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/trainguard/trainguard/test/scale"
)

func main() {
	o := scale.Defaults()
	flag.IntVar(&o.Nodes, "nodes", o.Nodes, "simulated nodes")
	flag.IntVar(&o.Zones, "zones", o.Zones, "zones the nodes are spread over (zone 0 goes dark in the outage)")
	flag.IntVar(&o.TrainingPods, "training-pods", 0, "training pods (default 10 per node)")
	flag.IntVar(&o.Jobs, "jobs", 0, "PyTorchJobs the training pods belong to (default 1 per 25 training pods)")
	flag.IntVar(&o.OtherPods, "other-pods", -1, "pods of other workloads, not opted in (default 2 per node)")
	flag.IntVar(&o.Namespaces, "namespaces", o.Namespaces, "tenant namespaces sharing the jobs")
	flag.IntVar(&o.Clients, "clients", o.Clients, "concurrent creates while populating")
	flag.IntVar(&o.Bursts, "bursts", o.Bursts, "rounds of admission bursts; each round creates 64 pods at once in each of 6 setups (a job's pods and bare pods, through trainguard and through a no-op webhook; a job's pods as trainguard stores them, through the no-op and through a no-op answering trainguard's patch)")
	flag.DurationVar(&o.Steady, "steady", o.Steady, "steady-state measuring window")
	flag.DurationVar(&o.Churn, "churn", o.Churn, "how long training pods keep exiting 137")
	flag.Float64Var(&o.ChurnPercent, "churn-percent", o.ChurnPercent, "share of training pods exiting 137 per minute")
	flag.IntVar(&o.LeaseSeconds, "lease-seconds", o.LeaseSeconds, "node Lease duration (and trainguard's --lease-lost-after/--force-delete-after when not 40)")
	tgFlags := flag.String("trainguard-flags", "", "flags added to the chart's arguments of every trainguard start, space-separated, e.g. "+
		"'--leader-election-renew-deadline=30s --leader-election-lease-duration=45s' where the API server is too slow to renew the leader Lease in 10 s")
	flag.StringVar(&o.MemoryLimit, "memory-limit", "", "trainguard's memory limit instead of the chart's 256Mi (GOMEMLIMIT follows it), e.g. 384Mi, "+
		"the chart's sizing for 50,000 managed pods")
	scenarios := flag.String("scenarios", strings.Join(o.Scenarios, ","), "scenarios, in order")
	flag.StringVar(&o.WorkDir, "workdir", "", "where logs and report.json go (default a new temporary directory)")
	flag.Parse()
	if o.TrainingPods == 0 {
		o.TrainingPods = 10 * o.Nodes
	}
	if o.Jobs == 0 {
		o.Jobs = max(o.TrainingPods/25, 1)
	}
	if o.OtherPods < 0 {
		o.OtherPods = 2 * o.Nodes
	}
	o.Scenarios = strings.Split(*scenarios, ",")
	o.TrainguardFlags = strings.Fields(*tgFlags)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := scale.Run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}
