package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// prometheusOperatorModule holds the monitoring.coreos.com CRDs the
// ServiceMonitor and PrometheusRule are dry-run against. Read from the Go
// module cache at test time, never committed.
const prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// suite is the package's fixture: a control plane with trainguard's
// webhooks and prometheus-operator's CRDs, and trainguard running in-process.
type suite struct {
	cp *controlplane.ControlPlane
}

var env suite // TestMain's fixture, shared by every test in the package.

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunSuite("observability suite", m, run))
}

func run(m *testing.M) (int, error) {
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return 1, err
	}
	defer func() { _ = cp.Stop() }()
	env.cp = cp
	crds, err := prometheusOperatorCRDs()
	if err != nil {
		return 1, err
	}
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}); err != nil {
		return 1, fmt.Errorf("installing prometheus-operator CRDs: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controlplane.Namespace}}
	if err := cp.Client.Create(context.Background(), ns); err != nil {
		return 1, fmt.Errorf("creating %s: %w", controlplane.Namespace, err)
	}
	tg, err := cp.StartTrainguard(context.Background(), controlplane.TrainguardOptions{})
	if err != nil {
		return 1, err
	}
	defer func() { _ = tg.Stop() }()
	return m.Run(), nil
}

// prometheusOperatorCRDs returns the ServiceMonitor and PrometheusRule CRDs
// from the module cache, downloading the module on first use.
func prometheusOperatorCRDs() ([]string, error) {
	root, err := chart.RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "mod", "download", "-json", prometheusOperatorModule)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s: %w", prometheusOperatorModule, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Error != "" || mod.Dir == "" {
		return nil, fmt.Errorf("go mod download %s: %v %s", prometheusOperatorModule, err, mod.Error)
	}
	dir := filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
	return []string{
		filepath.Join(dir, "monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(dir, "monitoring.coreos.com_prometheusrules.yaml"),
	}, nil
}

// render renders the chart with every monitoring piece on, as the
// integration suite's release ("trainguard" in trainguard-system).
func render(t *testing.T, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	helm, err := chart.HelmBin()
	if err != nil {
		t.Fatalf("the observability tests need the real helm binary: %v", err)
	}
	dir, err := chart.Dir()
	if err != nil {
		t.Fatal(err)
	}
	set := append([]string{
		"monitoring.serviceMonitor.enabled=true",
		"monitoring.prometheusRule.enabled=true",
		"monitoring.grafanaDashboard.enabled=true",
	}, extra...)
	if err := chart.Lint(helm, dir, controlplane.Namespace, set...); err != nil {
		t.Fatalf("helm lint: %v", err)
	}
	objs, err := chart.Render(helm, dir, controlplane.ReleaseName, controlplane.Namespace, set...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return objs
}
