//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// lanes are the scenarios that run side by side: each lane runs its
// scenarios one after another on training nodes of its own (labelled
// laneLabel; its namespaces get them as their node selector), so a drain,
// a node killed or frozen, a node filled by the scheduler preemption or the
// ClusterQueue held by the Kueue scenarios never touches another lane. The
// goodput short form gets three nodes for its 2-rank jobs, so a node lost is
// not half of its cluster. Scenarios that act on trainguard itself (scaled
// to 0, upgraded, reinstalled) run alone after the lanes.
var lanes = []lane{
	{"goodput", 3, []string{"goodput"}},
	// node-warning joins the crash lane, the shortest of the four.
	{"crash", 2, []string{"node-crash", "trainjob-node-crash", "node-warning"}},
	{"drain", 2, []string{"drain", "indexed-job-drain", "trainjob-drain", "exit-codes", "rank-crash", "partition"}},
	{"kueue", 2, []string{"kueue-preemption", "checkpoint-aware-preemption", "scheduler-preemption"}},
}

type lane struct {
	name      string
	nodes     int
	scenarios []string
}

// TestE2E runs the scenarios on one cluster, the lanes side by side, and
// prints one table. Each scenario asserts its outcome; figures are printed,
// never asserted.
func TestE2E(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			fmt.Fprintf(os.Stdout, "e2e failure dump: %s\n", e.dump(context.Background()))
		}
		fmt.Fprint(os.Stdout, e.table())
	})
	scenario := func(name string, f func(t *testing.T)) {
		start, ran := time.Now(), false
		ok := t.Run(name, func(t *testing.T) { ran = true; f(t) })
		if !ran {
			return // not selected by -run
		}
		e.timed(name, time.Since(start))
		if !ok {
			e.record(name, false, "failed after %s (see the log above)", time.Since(start).Round(time.Second))
		}
	}
	scenario("install-cert-manager", func(t *testing.T) {
		d := e.helmInstall(ctx, t, true, "")
		info, err := e.checkCertManager(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.record("install (cert-manager mode)", true, "helm install → admission injecting %s; %s", d.Round(time.Second), info)
	})
	if t.Failed() {
		return // nothing below can work without admission
	}
	if err := e.setupLanes(ctx); err != nil {
		t.Fatal(err)
	}
	scenarios := map[string]func(*testing.T){
		"drain": e.drain, "indexed-job-drain": e.indexedJobDrain, "trainjob-drain": e.trainJobDrain,
		"kueue-preemption": e.kueuePreemption, "checkpoint-aware-preemption": e.checkpointAwarePreemption,
		"scheduler-preemption": e.schedulerPreemption, "exit-codes": e.exitCodes, "rank-crash": e.rankCrash,
		"trainjob-node-crash": e.trainJobCrash, "partition": e.partition, "node-crash": e.nodeCrash,
		"node-warning": e.nodeWarning,
		// E2E_GOODPUT=0 leaves the goodput short form (docs/goodput.md) out of a local run.
		"goodput": e.goodputShort,
	}
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, s := range l.scenarios {
				if s == "goodput" && os.Getenv("E2E_GOODPUT") == "0" {
					continue
				}
				scenario(s, scenarios[s])
			}
		}()
	}
	wg.Wait()
	scenario("trainguard-down", e.trainguardDown)
	scenario("upgrade-under-load", e.upgradeUnderLoad)
	scenario("install-self-managed", func(t *testing.T) {
		if _, err := e.helm(ctx, "uninstall", releaseName, "-n", releaseNS, "--wait"); err != nil {
			t.Logf("uninstall before the self-managed install: %v", err)
		}
		d := e.helmInstall(ctx, t, false, "")
		n, err := e.caBundles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.record("install (self-managed certs)", true, "helm install → admission injecting %s; CA injected by trainguard into %d webhooks", d.Round(time.Second), n)
	})
}
