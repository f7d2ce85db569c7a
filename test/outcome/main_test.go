// Package outcome is the integration test of the checkpoint outcome reader
// (issue 14): a real kube-apiserver and etcd, trainguard's real manager,
// and the kubelet simulated by writing each pod's terminated container
// state, termination message included, through the status subresource.
package outcome

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/test/controlplane"
)

type suite struct {
	cp *controlplane.ControlPlane
	c  client.Client
}

var env suite // TestMain's fixture, shared by every test in the package.

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunSuite("outcome suite", m, run))
}

func run(m *testing.M) (int, error) {
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return 1, err
	}
	defer func() { _ = cp.Stop() }()
	env.cp, env.c = cp, cp.Client
	// Before trainguard starts, as in a cluster where Trainer is installed
	// first: the pod webhook then recognises TrainJob pods.
	if err := cp.InstallTrainJobCRDs(); err != nil {
		return 1, err
	}
	tg, err := cp.StartTrainguard(context.Background(), controlplane.TrainguardOptions{})
	if err != nil {
		return 1, err
	}
	defer func() { _ = tg.Stop() }()
	return m.Run(), nil
}
