//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestE2E runs the scenarios in order on one cluster and prints one table.
// Each scenario asserts its outcome; figures are printed, never asserted.
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
		start := time.Now()
		ok := t.Run(name, f)
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
	scenario("drain", e.drain)
	scenario("indexed-job-drain", e.indexedJobDrain)
	scenario("trainjob-drain", e.trainJobDrain)
	scenario("kueue-preemption", e.kueuePreemption)
	scenario("checkpoint-aware-preemption", e.checkpointAwarePreemption)
	scenario("scheduler-preemption", e.schedulerPreemption)
	scenario("exit-codes", e.exitCodes)
	scenario("rank-crash", e.rankCrash)
	scenario("trainguard-down", e.trainguardDown)
	scenario("upgrade-under-load", e.upgradeUnderLoad)
	scenario("trainjob-node-crash", e.trainJobCrash)
	scenario("partition", e.partition)
	// The goodput short form (docs/goodput.md) disrupts nodes, so it runs
	// after every scenario that needs them healthy, and before node crash
	// (which uninstalls trainguard). E2E_GOODPUT=0 leaves it out of a local
	// run (it costs about 7 minutes).
	if os.Getenv("E2E_GOODPUT") != "0" {
		scenario("goodput", e.goodputShort)
	}
	scenario("node-crash", e.nodeCrash) // uninstalls trainguard for the plain-Kubernetes half
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
