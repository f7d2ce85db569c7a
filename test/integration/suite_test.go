// Package integration runs trainguard against a real kube-apiserver and
// etcd: the API server calls trainguard's webhooks over TLS, with the
// webhook configurations rendered from the Helm chart.
package integration

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/test/controlplane"
)

// suite is the shared control plane; tests create their own namespaces.
type suite struct {
	cp *controlplane.ControlPlane
	tg *controlplane.Trainguard
	c  client.Client
	// probes and metrics are the addresses trainguard serves them on.
	probes, metrics string
}

var env suite // TestMain's fixture, shared by every test in the package.

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunSuite("integration suite", m, run))
}

func run(m *testing.M) (int, error) {
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return 1, err
	}
	defer func() { _ = cp.Stop() }()
	env.cp, env.c = cp, cp.Client
	if env.probes, err = controlplane.FreeAddr(); err != nil {
		return 1, err
	}
	if env.metrics, err = controlplane.FreeAddr(); err != nil {
		return 1, err
	}
	tg, err := cp.StartTrainguard(context.Background(), controlplane.TrainguardOptions{ProbeAddr: env.probes, MetricsAddr: env.metrics})
	if err != nil {
		return 1, err
	}
	env.tg = tg
	code := m.Run()
	if env.tg != nil {
		_ = env.tg.Stop()
	}
	return code, nil
}
