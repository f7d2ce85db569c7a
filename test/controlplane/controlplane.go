// Package controlplane starts a real kube-apiserver and etcd (envtest, with
// the binaries hack/build-k8s.sh builds into bin/k8s/<version>, KUBE_VERSION
// picking the release: version.go), installs the kubeflow
// and KubeDL PyTorchJob CRDs and trainguard's webhook configurations
// rendered from the Helm chart, and runs trainguard's real manager
// in-process behind real TLS. The integration suite and `make demo` use it.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/server"
	"github.com/trainguard/trainguard/test/chart"
)

// Namespace trainguard is "installed" in; the chart excludes it.
const Namespace = "trainguard-system"

// ReleaseName of the rendered chart, so its configurations are named "trainguard".
const ReleaseName = "trainguard"

// Options for Start.
type Options struct {
	// ChartValues are extra --set flags for rendering the webhook configurations.
	ChartValues []string
	Log         logr.Logger
}

// ControlPlane is a running API server with trainguard's webhooks registered.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	// Mutating and Validating are the configurations as installed.
	Mutating   *admissionregistrationv1.MutatingWebhookConfiguration
	Validating *admissionregistrationv1.ValidatingWebhookConfiguration
	log        logr.Logger
}

// Start boots etcd and kube-apiserver and installs CRDs and webhook
// configurations. It does not start trainguard: see StartTrainguard.
func Start(opts Options) (*ControlPlane, error) {
	root, err := chart.RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	kubeflowCRD, err := kubeflowPyTorchJobCRD()
	if err != nil {
		return nil, err
	}
	mutating, validating, err := renderWebhooks(opts.ChartValues)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              []string{kubeflowCRD, filepath.Join(root, "test", "crds")},
			ErrorIfPathMissing: true,
		},
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			MutatingWebhooks:   []*admissionregistrationv1.MutatingWebhookConfiguration{mutating},
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{validating},
			LocalServingHost:   "127.0.0.1",
		},
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return &ControlPlane{Env: env, Config: cfg, Client: c, Mutating: mutating, Validating: validating, log: log}, nil
}

// Stop tears the control plane down.
func (cp *ControlPlane) Stop() error { return cp.Env.Stop() }

// Trainguard is one running trainguard manager.
type Trainguard struct {
	cancel context.CancelFunc
	done   chan error
}

// TrainguardOptions for StartTrainguard.
type TrainguardOptions struct {
	Config *configv1alpha1.Configuration
	// Rescheduler replaces Config's rescheduler block.
	Rescheduler *rescheduler.Options
	LeaderElect bool
	// Port overrides the webhook port (a second manager needs its own).
	Port int
	// CertMode is server.CertModeFiles (the default: envtest's certificate
	// in envtest's LocalServingCertDir) or server.CertModeSelfManaged.
	CertMode string
	// CertDir overrides the directory the webhook server loads its
	// certificate from (default envtest's LocalServingCertDir). In
	// self-managed mode, use a directory of your own so the certificate
	// served is provably trainguard's.
	CertDir string
	// CertSecret names the self-managed certificate Secret in Namespace
	// (default "<ReleaseName>-tls", as the chart names it).
	CertSecret string
	// ProbeAddr serves /healthz and /readyz (e.g. "127.0.0.1:0" is not
	// allowed by the manager; pick a free port); empty disables them.
	ProbeAddr string
	// MetricsAddr serves /metrics; empty disables it.
	MetricsAddr string
}

// StartTrainguard runs trainguard's manager in-process on the port and
// certificates envtest registered in the webhook configurations, and waits
// until it serves TLS.
func (cp *ControlPlane) StartTrainguard(ctx context.Context, o TrainguardOptions) (*Trainguard, error) {
	// trainguard's own namespace holds its lease and the rescheduler's
	// records; the chart is installed into it, so it always exists. (A
	// manager in a child process has no client: its parent created it.)
	if cp.Client != nil {
		ownNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
		if err := cp.Client.Create(ctx, ownNS); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %s: %w", Namespace, err)
		}
	}
	cfg := o.Config
	if cfg == nil {
		cfg = configv1alpha1.Default()
	}
	if o.Rescheduler != nil { // on a copy: the caller's Configuration is not changed
		c := *cfg
		c.Rescheduler = *o.Rescheduler
		cfg = &c
	}
	wio := cp.Env.WebhookInstallOptions
	port := wio.LocalServingPort
	if o.Port != 0 {
		port = o.Port
	}
	certDir := wio.LocalServingCertDir
	if o.CertDir != "" {
		certDir = o.CertDir
	}
	so := server.Options{
		Config: cfg, CertDir: certDir, CertMode: o.CertMode, WebhookHost: wio.LocalServingHost, WebhookPort: port,
		MetricsAddr: orZero(o.MetricsAddr), ProbeAddr: orZero(o.ProbeAddr), Namespace: Namespace, LeaderElect: o.LeaderElect,
		NamespaceMirror: true, Log: cp.log, SeveralInProcess: true,
	}
	if o.CertMode == server.CertModeSelfManaged {
		// The names the chart passes as --cert-secret, --webhook-service
		// and --webhook-config-name.
		so.CertSecret, so.WebhookService, so.WebhookConfigName = o.CertSecret, ReleaseName, ReleaseName
		if so.CertSecret == "" {
			so.CertSecret = ReleaseName + "-tls"
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	mgr, err := server.New(ctx, cp.Config, so)
	if err != nil {
		cancel()
		return nil, err
	}
	tg := &Trainguard{cancel: cancel, done: make(chan error, 1)}
	go func() { tg.done <- mgr.Start(ctx) }()
	if err := waitServing(ctx, mgr, tg.done); err != nil {
		cancel()
		return nil, err
	}
	return tg, nil
}

// Stop stops the manager and waits for it to exit.
func (tg *Trainguard) Stop() error {
	tg.cancel()
	select {
	case err := <-tg.done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("trainguard did not stop within 30s")
	}
}

func waitServing(ctx context.Context, mgr ctrl.Manager, done chan error) error {
	check := mgr.GetWebhookServer().StartedChecker()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("trainguard exited while starting: %w", err)
		default:
		}
		if check(nil) == nil && mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("trainguard's webhook server did not serve TLS within 30s")
}

// renderWebhooks takes the webhook configurations from the Helm chart, so
// the selectors and policies under test are the shipped ones.
func renderWebhooks(values []string) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	objs, err := chart.RenderShipped(ReleaseName, Namespace, values...)
	if err != nil {
		return nil, nil, fmt.Errorf("rendering chart: %w", err)
	}
	return chart.WebhookConfigurations(objs)
}

// kubeflowPyTorchJobCRD returns the path of kubeflow's PyTorchJob CRD in
// the Go module cache (downloaded on first use).
func kubeflowPyTorchJobCRD() (string, error) {
	dir, err := chart.ModuleDir(chart.KubeflowTrainingModule)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "manifests", "base", "crds", "kubeflow.org_pytorchjobs.yaml"), nil
}

// InstallTrainJobCRDs installs Kubeflow Trainer's TrainJob and JobSet's
// CRDs (chart.TrainerModule, chart.JobSetModule, from the Go module cache).
// No controller runs: suites create the JobSet, Job and pod as the
// controllers would (TrainJob -> JobSet -> Job -> Pod).
func (cp *ControlPlane) InstallTrainJobCRDs() error {
	tdir, err := chart.ModuleDir(chart.TrainerModule)
	if err != nil {
		return err
	}
	jdir, err := chart.ModuleDir(chart.JobSetModule)
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

// orZero turns "no address" into the manager's "disabled".
func orZero(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

// FreeAddr returns a loopback address with a port nobody listens on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer func() { _ = l.Close() }() // only the address was wanted
	return l.Addr().String(), nil
}
