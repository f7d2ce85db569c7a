// Package trainer runs trainguard against a real kube-apiserver and etcd
// with the real Kubeflow Trainer v2.0.0 controller manager and the real
// JobSet v0.8.2 controller (both built from Go modules by
// hack/build-trainer.sh into bin/trainer), their CRDs read from the Go
// module cache. envtest has no kube-controller-manager, so no batch Job
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

	"github.com/trainguard/trainguard/internal/rescheduler"
	"github.com/trainguard/trainguard/test/controlplane"
)

const nodeLostGrace = 2 * time.Second

type suite struct {
	cp *controlplane.ControlPlane
	c  client.Client
}

var env suite //nolint:gochecknoglobals // TestMain's fixture, shared by every test in the package.

func TestMain(m *testing.M) {
	// `go test -list` (hack/fuzz.sh discovers Fuzz targets so) needs no cluster.
	flag.Parse()
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	os.Exit(controlplane.RunSuite("trainer suite", m, run))
}

func run(m *testing.M) (int, error) {
	bins, err := binaries()
	if err != nil {
		return 1, err
	}
	cp, err := controlplane.Start(controlplane.Options{ChartValues: []string{"trainer.enabled=true"}})
	if err != nil {
		return 1, err
	}
	defer func() { _ = cp.Stop() }()
	env.cp, env.c = cp, cp.Client
	if err := installThirdParty(cp); err != nil {
		return 1, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := startControllers(ctx, cp, bins)
	defer stop()
	if err != nil {
		return 1, err
	}
	// trainguard starts after Trainer's CRDs exist, as the chart expects.
	// A short node-lost grace, so the node-loss test does not wait a minute.
	resched := rescheduler.DefaultOptions()
	resched.NodeLostGrace = nodeLostGrace
	tg, err := cp.StartTrainguard(ctx, controlplane.TrainguardOptions{Rescheduler: &resched})
	if err != nil {
		return 1, err
	}
	defer func() { _ = tg.Stop() }()
	return m.Run(), nil
}
