// Package trainer runs trainguard against a real kube-apiserver and etcd
// with the real Kubeflow Trainer controller manager and the real JobSet
// controller (both built from Go modules by hack/build-trainer.sh into
// bin/trainer), their CRDs read from the Go module cache. TRAINER_VERSION
// picks the pair: v2.3.0 with JobSet v0.12.0 (the default, the newest) or
// v2.0.0 with JobSet v0.8.2 (versions_test.go says what differs). envtest has no kube-controller-manager, so no batch Job
// controller: the suite asserts on the JobSet and Jobs the real controllers
// create, and creates each trainer pod exactly as the Job controller would
// (from the Job's pod template, owned by the Job, with its index), which the
// API server then sends through trainguard's pod webhook.
package trainer

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/test/controlplane"
)

const nodeLostGrace = 2 * time.Second

type suite struct {
	cp  *controlplane.ControlPlane
	c   client.Client
	rel release // the Trainer and JobSet under test
}

var env suite // TestMain's fixture, shared by every test in the package.

func TestMain(m *testing.M) {
	// `go test -list` (hack/fuzz.sh discovers Fuzz targets so) needs no cluster.
	flag.Parse()
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	rel, relErr := selectRelease()
	name := "trainer suite"
	if relErr == nil {
		name += " (" + rel.String() + ")"
	}
	os.Exit(controlplane.RunSuite(name, m, func(m *testing.M) (int, error) {
		if relErr != nil {
			return 1, relErr
		}
		env.rel = rel
		return run(m)
	}))
}

func run(m *testing.M) (int, error) {
	bins, err := binaries(env.rel)
	if err != nil {
		return 1, err
	}
	cp, err := controlplane.Start(controlplane.Options{ChartValues: []string{"trainer.enabled=true"}})
	if err != nil {
		return 1, err
	}
	defer func() { _ = cp.Stop() }()
	env.cp, env.c = cp, cp.Client
	if err := installThirdParty(cp, env.rel); err != nil {
		return 1, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := startControllers(ctx, cp, env.rel, bins)
	defer stop()
	if err != nil {
		return 1, err
	}
	// trainguard starts after Trainer's CRDs exist, as the chart expects.
	// A short node-lost grace, so the node-loss test does not wait a minute.
	resched := rescheduler.DefaultOptions()
	resched.NodeLostGrace.Duration = nodeLostGrace
	tg, err := cp.StartTrainguard(ctx, controlplane.TrainguardOptions{Rescheduler: &resched})
	if err != nil {
		return 1, err
	}
	defer func() { _ = tg.Stop() }()
	return m.Run(), nil
}
