//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/test/goodput"
)

// goodputShort (issue 29, short form): the example trainer in three arms
// side by side (trainguard with its shipped defaults in an opted-in
// namespace; plain Kubernetes in a namespace that is not opted in; Kueue's
// FailureRecoveryPolicy on the pods of a third), every one of goodput.ShortKinds
// once (E2E_GOODPUT_INTERVAL apart, 3 minutes by default), the same
// schedule for every arm. Asserted: trainguard's ETTR is above both others',
// and no arm's training state is corrupted (every step's loss equal across
// incarnations and arms, no resume ahead of the progress, both ranks
// resumed together). The figures are printed.
func (e *env) goodputShort(t *testing.T) {
	ctx := context.Background()
	// More worker nodes than ranks: a node lost is not half the cluster.
	if n := len(e.nodesOf(t)); n < 3 {
		t.Fatalf("the goodput short form needs at least 3 worker nodes for its 2-rank jobs, has %d", n)
	}
	interval := durationEnv("E2E_GOODPUT_INTERVAL", 3*time.Minute)
	evs := goodput.Short(goodput.ShortSeed, interval, goodput.ShortKinds)
	t.Log(goodput.Format(goodput.ShortSeed, evs))
	r := goodput.New(goodput.Config{
		Kubectl: e.root + "/bin/cluster/kubectl", Hook: e.root + "/hack/cluster/goodput-hook.sh",
		Image: trainerImage, PullPolicy: string(corev1.PullNever), Claim: claimName,
		Arms: goodput.Arms("e2e-goodput"), Events: evs, Interval: interval,
		StepDelay: 0.3, SaveEvery: 20,
		Namespace: func(ctx context.Context, a goodput.Arm) error {
			e.namespace(ctx, t, a.Namespace, a.Trainguard)
			return nil
		},
		Logf: t.Logf,
	}, e.cs, e.dyn)
	defer r.Cleanup(ctx)
	start := time.Now()
	res, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table := res.Table()
	t.Log(table)
	// the curves, for hack/goodput/plot.py
	progress, events := res.CSV()
	out := clusterDir + "-goodput"
	if err := os.MkdirAll(out, 0o755); err == nil {
		_ = os.WriteFile(out+"/progress.csv", []byte(progress), 0o644)
		_ = os.WriteFile(out+"/events.csv", []byte(events), 0o644)
		_ = os.WriteFile(out+"/table.md", []byte(goodput.Format(goodput.ShortSeed, evs)+table), 0o644)
		t.Logf("goodput curves in %s (hack/goodput/plot.py %s docs/goodput.png)", out, out)
	}
	tg, _ := res.ByName("trainguard")
	var figs []string
	for _, a := range res.Arms {
		figs = append(figs, fmt.Sprintf("%s %.1f %%", a.Arm.Name, 100*a.ETTR))
	}
	ok := true
	for _, a := range res.Arms[1:] {
		if tg.ETTR <= a.ETTR {
			ok = false
			t.Errorf("trainguard's ETTR %.1f %% is not above %s's %.1f %%", 100*tg.ETTR, a.Arm.Name, 100*a.ETTR)
		}
	}
	for _, c := range res.Corrupt {
		ok = false
		t.Errorf("training state: %s", c)
	}
	e.record("goodput (short form)", ok, "seed %d, %d disruptions %s apart, ETTR %s; scenario %s",
		goodput.ShortSeed, len(evs), interval, strings.Join(figs, ", "), time.Since(start).Round(time.Second))
}
