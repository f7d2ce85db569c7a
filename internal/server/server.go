// Package server assembles the trainguard process: a controller-runtime
// manager with the TLS webhook server, the namespace opt-in mirror, the
// rescheduler, the checkpoint-outcome reader, the priority boost and,
// optionally, self-managed certificates. It builds the kind set once
// (Options.Kinds) and hands it to the webhook and every controller.
// `trainguard serve`, the integration suite and `make demo` all build it
// here, so what the tests run is what ships.
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainguard/trainguard/certs"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/controllers/boost"
	"github.com/trainguard/trainguard/internal/controllers/optin"
	"github.com/trainguard/trainguard/internal/controllers/outcome"
	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/controllers/warning"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/webhook"
)

// Certificate sources.
const (
	CertModeFiles       = "files"
	CertModeSelfManaged = "self-managed"
)

// Options configure the process.
type Options struct {
	// Config is the defaulted Configuration (flags applied): the webhook's
	// and the controllers' one source of settings, the rescheduler's too.
	Config *configv1alpha1.Configuration
	// Kinds are the job kinds the webhook and every controller serve; nil
	// means jobs.Builtin(), built once here.
	Kinds *jobs.Kinds
	// CertDir holds tls.crt and tls.key; they are hot-reloaded.
	CertDir  string
	CertMode string
	// WebhookHost is empty for all interfaces.
	WebhookHost string
	WebhookPort int
	MetricsAddr string
	// MetricsSecure serves /metrics over HTTPS (the webhook's certificate)
	// and lets only callers the API server authenticates and authorizes for
	// GET /metrics read it (TokenReview + SubjectAccessReview).
	MetricsSecure bool
	ProbeAddr     string
	// Timeouts of webhook connections; zero means the defaults.
	ReadTimeout, ReadHeaderTimeout, WriteTimeout, IdleTimeout, HandshakeTimeout time.Duration
	// MaxConnections open to the webhook server, and from one source
	// address; zero means the defaults.
	MaxConnections, MaxConnectionsPerSource int
	// Limits bound the admission reviews in flight.
	Limits LimiterOptions
	// Namespace is trainguard's own namespace.
	Namespace   string
	LeaderElect bool
	// LeaderElectionID names the Lease; empty means
	// contract.LeaderElectionID, the one name the chart's RBAC and
	// admission policy let trainguard's ServiceAccount write.
	LeaderElectionID  string
	CertSecret        string
	WebhookService    string
	WebhookConfigName string
	NamespaceMirror   bool
	Log               logr.Logger
	// SeveralInProcess allows more than one manager in one process (tests
	// run a second replica or restart trainguard); controller names must
	// otherwise be unique because they name metrics.
	SeveralInProcess bool
}

// New builds the manager with everything registered; the caller starts it.
// In self-managed mode the certificates are prepared before New returns,
// because the webhook server needs them before the manager's cache runs.
func New(ctx context.Context, restCfg *rest.Config, o Options) (ctrl.Manager, error) {
	if o.CertMode == "" {
		o.CertMode = CertModeFiles
	}
	if o.CertMode != CertModeFiles && o.CertMode != CertModeSelfManaged {
		return nil, fmt.Errorf("cert mode %q: use %s or %s", o.CertMode, CertModeFiles, CertModeSelfManaged)
	}
	if o.Config == nil {
		o.Config = configv1alpha1.Default()
	}
	o.Config = o.Config.WithDefaults()
	if o.Kinds == nil {
		builtin := jobs.Builtin()
		o.Kinds = &builtin
	}
	if o.Namespace != "" && !o.Config.Excluded(o.Namespace) {
		o.Config.ExcludedNamespaces = append(o.Config.ExcludedNamespaces, o.Namespace)
	}
	mgr, err := newManager(restCfg, o)
	if err != nil {
		return nil, err
	}
	if err := wire(ctx, restCfg, mgr, o); err != nil {
		return nil, err
	}
	return mgr, nil
}

// newManager builds the manager: a TLS-only webhook server with HTTP/2
// disabled, timeouts and a concurrency limit (see NewWebhookServer).
func newManager(restCfg *rest.Config, o Options) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	hooks := NewWebhookServer(WebhookServerOptions{
		Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir,
		ReadTimeout: o.ReadTimeout, ReadHeaderTimeout: o.ReadHeaderTimeout, WriteTimeout: o.WriteTimeout, IdleTimeout: o.IdleTimeout, HandshakeTimeout: o.HandshakeTimeout,
		MaxConnections: o.MaxConnections, MaxConnectionsPerSource: o.MaxConnectionsPerSource, Limits: o.Limits, TLSOpts: []func(*tls.Config){tlsHardening}, Log: o.Log.WithName("webhook-server"),
	})
	id := o.LeaderElectionID
	if id == "" {
		id = contract.LeaderElectionID
	}
	le := o.Config.LeaderElection
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        o.Log,
		WebhookServer:                 hooks,
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              id,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &le.LeaseDuration.Duration,
		RenewDeadline:                 &le.RenewDeadline.Duration,
		RetryPeriod:                   &le.RetryPeriod.Duration,
		// Bounded memory: ConfigMaps of trainguard's namespace only, pods
		// and nodes stripped to what the rescheduler reads, no managedFields.
		Cache: cache.Options{
			ByObject:         rescheduler.CacheByObject(o.Namespace, *o.Kinds),
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		Controller: crconfig.Controller{SkipNameValidation: &o.SeveralInProcess},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// warningTrainers reaches the trainers for the node-warning controller
// through the trainer status client: the checkpoint-now request and the
// status document it is acknowledged by.
func warningTrainers() warning.Trainers {
	fetch, request := trainerstatus.HTTPFetcher(), trainerstatus.HTTPRequester()
	return warning.TrainerFuncs{
		Request: func(ctx context.Context, podIP, reason string) (int64, error) {
			ack, err := request(ctx, podIP, reason)
			return ack.Step, err
		},
		Read: func(ctx context.Context, podIP string) (int64, *int64, error) {
			s, err := fetch(ctx, podIP)
			return s.Step, s.CommittedStep, err
		},
	}
}

// tlsHardening: TLS >= 1.2 and HTTP/1.1 only (HTTP/2 rapid reset, CVE-2023-44487).
func tlsHardening(c *tls.Config) {
	c.NextProtos = []string{"http/1.1"}
	c.MinVersion = tls.VersionTLS12
}

// metricsOptions serves /metrics over HTTPS with the webhook's certificate
// and controller-runtime's authn/authz filter when MetricsSecure is set:
// the metrics name every webhook and its decisions, which a tenant has no
// business reading.
func metricsOptions(o Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsAddr}
	if !o.MetricsSecure {
		return m
	}
	m.SecureServing = true
	m.CertDir = o.CertDir
	m.TLSOpts = []func(*tls.Config){tlsHardening}
	m.FilterProvider = filters.WithAuthenticationAndAuthorization
	return m
}

// wire registers the webhooks, controllers and probes on mgr.
func wire(ctx context.Context, restCfg *rest.Config, mgr ctrl.Manager, o Options) error {
	kinds := *o.Kinds
	avoider := rescheduler.NewBadNodeStore(mgr.GetCache(), o.Config.Rescheduler, kinds, o.Namespace)
	if err := webhook.Setup(mgr, webhook.Options{Config: o.Config, OwnNamespace: o.Namespace, Avoider: avoider, Kinds: o.Kinds}); err != nil {
		return fmt.Errorf("setting up webhooks: %w", err)
	}
	if o.NamespaceMirror {
		if err := optin.SetupMirror(mgr); err != nil {
			return fmt.Errorf("setting up namespace label mirror: %w", err)
		}
	}
	if err := rescheduler.Setup(mgr, o.Config, kinds, o.Namespace); err != nil {
		return fmt.Errorf("setting up rescheduler: %w", err)
	}
	// The checkpoint outcome reader and the priority boost share the
	// rescheduler's pod cache (and the outcome reader its RBAC), so they
	// run only with it.
	if err := outcome.Setup(mgr, o.Config, kinds, *o.Config.Rescheduler.Enabled); err != nil {
		return fmt.Errorf("setting up checkpoint outcome reader: %w", err)
	}
	if err := boost.Setup(mgr, o.Config, kinds, o.Namespace, *o.Config.Rescheduler.Enabled); err != nil {
		return fmt.Errorf("setting up priority boost: %w", err)
	}
	if err := warning.Setup(mgr, o.Config, kinds, o.Namespace, *o.Config.Rescheduler.Enabled, warningTrainers()); err != nil {
		return fmt.Errorf("setting up node-warning controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook-tls", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("adding readyz: %w", err)
	}
	if o.CertMode != CertModeSelfManaged {
		return nil
	}
	// A direct client: the files must exist before the webhook server
	// starts, which is before the manager's cache is running.
	direct, err := client.New(restCfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("creating client for self-managed certificates: %w", err)
	}
	sm := certs.NewSelfManaged(direct, certs.SelfManagedOptions{
		Namespace: o.Namespace, SecretName: o.CertSecret, ServiceName: o.WebhookService,
		WebhookConfigName: o.WebhookConfigName, CertDir: o.CertDir, Log: o.Log.WithName("certs"),
	})
	if err := sm.Prepare(ctx); err != nil {
		return fmt.Errorf("preparing self-managed certificates: %w", err)
	}
	if err := mgr.Add(sm); err != nil {
		return fmt.Errorf("adding self-managed certificates: %w", err)
	}
	if err := mgr.AddReadyzCheck("ca-bundle", sm.ReadyCheck); err != nil {
		return fmt.Errorf("adding readyz: %w", err)
	}
	return nil
}
