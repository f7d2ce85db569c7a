// Package outcome is the integration test of the checkpoint outcome reader
// (issue 14): a real kube-apiserver and etcd, trainguard's real manager,
// and the kubelet simulated by writing each pod's terminated container
// state, termination message included, through the status subresource.
package outcome

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trainguard/trainguard/test/controlplane"
)

type suite struct {
	cp *controlplane.ControlPlane
	c  client.Client
}

var env suite //nolint:gochecknoglobals // TestMain's fixture, shared by every test in the package.

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
	if err := installTrainerCRDs(cp); err != nil {
		return 1, err
	}
	tg, err := cp.StartTrainguard(context.Background(), controlplane.TrainguardOptions{})
	if err != nil {
		return 1, err
	}
	defer func() { _ = tg.Stop() }()
	return m.Run(), nil
}

// Kubeflow Trainer v2 and JobSet, whose CRDs come from the Go module cache:
// TrainJob pods are owned TrainJob -> JobSet -> Job -> Pod.
const (
	trainerModule = "github.com/kubeflow/trainer/v2@v2.3.0"
	jobSetModule  = "sigs.k8s.io/jobset@v0.12.0"
)

// installTrainerCRDs installs the TrainJob and JobSet CRDs. No controller
// runs: the tests create the JobSet, Job and pod as the controllers would.
func installTrainerCRDs(cp *controlplane.ControlPlane) error {
	tdir, err := moduleDir(trainerModule)
	if err != nil {
		return err
	}
	jdir, err := moduleDir(jobSetModule)
	if err != nil {
		return err
	}
	_, err = envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{ErrorIfPathMissing: true, Paths: []string{
		filepath.Join(tdir, "manifests", "base", "crds", "trainer.kubeflow.org_trainjobs.yaml"),
		filepath.Join(jdir, "config", "components", "crd", "bases", "jobset.x-k8s.io_jobsets.yaml"),
	}})
	if err != nil {
		return fmt.Errorf("installing the TrainJob and JobSet CRDs: %w", err)
	}
	return nil
}

// moduleDir downloads a module into the Go module cache (a no-op when it is
// there) and returns its directory.
func moduleDir(modVersion string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", modVersion).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", modVersion, m.Error)
	}
	return m.Dir, nil
}
