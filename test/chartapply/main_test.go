// Package chartapply sends every manifest the Helm chart renders to a real
// kube-apiserver (envtest) with server-side dry-run, cert-manager's CRDs
// installed, so schema, CEL and admission validation reject anything
// `helm template` and the chart's own tests would let through. The CRDs of
// the workload kinds (PyTorchJob, KubeDL PyTorchJob, TrainJob, the
// runtimes, JobSet) are installed too, for the fence and webhook tests.
package chartapply

import (
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// apiServer is the control plane every test in the package shares.
var apiServer struct { // TestMain's fixture.
	cfg *rest.Config
	c   client.Client
}

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunSuite("chartapply", m, run))
}

func run(m *testing.M) (int, error) {
	assets, err := controlplane.Assets()
	if err != nil {
		return 1, err
	}
	crds, err := chart.CertManagerCRDs()
	if err != nil {
		return 1, err
	}
	// The kinds trainguard's fence and Trainer webhook entries name.
	workloads, err := chart.WorkloadCRDs()
	if err != nil {
		return 1, err
	}
	crds = append(crds, workloads...)
	kueue, err := chart.KueueCRDs()
	if err != nil {
		return 1, err
	}
	crds = append(crds, kueue...)
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              crds,
			ErrorIfPathMissing: true,
		},
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	cfg, err := env.Start()
	if err != nil {
		return 1, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return 1, fmt.Errorf("creating client: %w", err)
	}
	apiServer.cfg, apiServer.c = cfg, c
	return m.Run(), nil
}
