package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainguard/trainguard/certs"
	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/server"
)

// serveOptions are the flags of `trainguard serve`.
type serveOptions struct {
	configPath         string
	certDir            string
	certMode           string
	devCerts           bool
	webhookPort        int
	metricsAddr        string
	metricsSecure      bool
	readTimeout        time.Duration
	readHeaderTimeout  time.Duration
	handshakeTimeout   time.Duration
	maxConnections     int
	maxPerSource       int
	writeTimeout       time.Duration
	idleTimeout        time.Duration
	limits             server.LimiterOptions
	probeAddr          string
	namespace          string
	leaderElect        bool
	certSecret         string
	webhookService     string
	webhookConfigName  string
	namespaceMirroring bool
	printConfig        bool
	// settings receives the Configuration's flags at parse time; runServe
	// replays the ones given onto the loaded file (config.ApplyFlags).
	settings *configv1alpha1.Configuration
	zap      zap.Options
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{settings: configv1alpha1.Default()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the admission webhooks and the rescheduler",
		Long: `serve runs trainguard's mutating and validating admission webhooks over
TLS (HTTP/2 disabled, TLS >= 1.2), the namespace opt-in mirror and the
leader-elected rescheduler. Every replica serves the webhooks; only the
leader reconciles.

Certificates come from --cert-dir (tls.crt, tls.key; hot-reloaded when the
files change, e.g. a cert-manager Secret mounted whole), or are created and
rotated by trainguard itself with --cert-mode=self-managed. For a laptop,
--dev-certs writes a self-signed CA and serving certificate into --cert-dir
when none exists.

Probes: /healthz and /readyz on --health-probe-bind-address (ready only once
TLS is serving); Prometheus metrics on --metrics-bind-address, over HTTPS
with the webhook's certificate, readable only by callers the API server
authenticates and authorizes for GET /metrics (--metrics-secure=false serves
plain HTTP to anyone, for local use).

Cost per request is bounded: a review body over 7 MiB is refused (413); a
body must arrive within --webhook-body-read-timeout of its headers and is
charged to the limits only by the bytes that arrived (a declared
Content-Length reserves nothing); at most --max-concurrent-reviews reviews
and --max-inflight-request-bytes of review bodies are handled at once, and a
review that finds no room within --review-queue-wait is answered 429 Too
Many Requests with Retry-After (the API server retries, then applies the
webhook's failurePolicy); at most --webhook-max-connections connections are
open at once, at most --webhook-max-connections-per-source of them from one
address, past three quarters of the cap a connection without a request in
flight (idle, unused, or still in its TLS handshake) gives its place to a new
one, the address holding the most first, a request to any other path than a
webhook's closes its connection, and every connection has handshake, header,
read, write and idle timeouts. Readiness never dials
the webhook port, so a full cap does not take the replica out of its
Service.

Every setting of the --config file is a flag too, named after its key in
kebab-case (agent.image is --agent-image; the rescheduler's block drops its
prefix: rescheduler.nodeLostGrace is --node-lost-grace, rescheduler.enabled
is --rescheduler). Precedence, for every flag:
` + config.Precedence + `.
--print-config prints the result and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), o, cmd.Flags())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.configPath, "config", "", "configuration file (apiVersion: config.trainguard.io/v1alpha1, kind: Configuration): injection policy and rescheduler settings; built-in defaults apply when empty. Each setting is a flag too; "+config.Precedence)
	fs.StringVar(&o.certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory holding tls.crt and tls.key (and ca.crt)")
	fs.StringVar(&o.certMode, "cert-mode", server.CertModeFiles, "where serving certificates come from: files (cert-manager or --dev-certs) or self-managed (trainguard keeps them in a Secret and injects the CA bundle)")
	fs.BoolVar(&o.devCerts, "dev-certs", false, "generate a self-signed CA and serving certificate into --cert-dir if none exists (local development only)")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "port of the TLS webhook server")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS (certificate from --cert-dir) with TokenReview/SubjectAccessReview authentication and authorization; false serves plain HTTP")
	fs.DurationVar(&o.readTimeout, "webhook-read-timeout", server.DefaultReadTimeout, "time allowed to read one admission request, headers and body")
	fs.DurationVar(&o.handshakeTimeout, "webhook-handshake-timeout", server.DefaultHandshakeTimeout, "time allowed for a connection's TLS handshake, from its acceptance (the API server's takes milliseconds); near --webhook-max-connections a connection still in its handshake gives its place to a new one sooner")
	fs.DurationVar(&o.readHeaderTimeout, "webhook-read-header-timeout", server.DefaultReadHeaderTimeout, "time allowed for a request's headers from their first byte (a connection waits for its first request as long as --webhook-idle-timeout)")
	fs.DurationVar(&o.limits.BodyReadTimeout, "webhook-body-read-timeout", server.DefaultBodyReadTimeout, "time allowed for a request's body once its headers are in; the body is read before it takes a place under the limits")
	fs.IntVar(&o.maxConnections, "webhook-max-connections", server.DefaultMaxConnections, "connections open to the webhook server at once (about 25 KiB each); further ones wait to be accepted, and past three quarters of it connections without a request in flight (idle, unused or still in their TLS handshake) give their place to new ones, the address holding the most first")
	fs.IntVar(&o.maxPerSource, "webhook-max-connections-per-source", server.DefaultMaxConnectionsPerSource, "connections one source address may hold open to the webhook server (at most --webhook-max-connections); one more takes the place of that address's longest-idle connection or, with none idle, is closed before its TLS handshake, so no single peer can hold the cap")
	fs.DurationVar(&o.writeTimeout, "webhook-write-timeout", server.DefaultWriteTimeout, "time allowed from the end of the request headers to the end of the response")
	fs.DurationVar(&o.idleTimeout, "webhook-idle-timeout", server.DefaultIdleTimeout, "how long an idle keep-alive connection, or one that has not sent its first request, stays open; keep it above the API server's 90 s, or a review it sends as trainguard closes the connection fails (broken pipe) and a fail-closed webhook refuses the object")
	fs.IntVar(&o.limits.MaxConcurrent, "max-concurrent-reviews", server.DefaultMaxConcurrent, "admission reviews handled at once; more wait up to --review-queue-wait, then get 429")
	fs.Int64Var(&o.limits.MaxInFlightBytes, "max-inflight-request-bytes", server.DefaultMaxInFlightBytes, "bytes of admission review bodies handled at once (counted as they arrive, at least 7 MiB; bodies still arriving get half this, at least 7 MiB); bounds memory, since decoding costs a few times the body")
	fs.DurationVar(&o.limits.QueueWait, "review-queue-wait", server.DefaultQueueWait, "how long a review waits for room under the limits before a 429; keep it below the webhooks' timeoutSeconds")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&o.namespace, "namespace", ownNamespaceDefault(), "trainguard's own namespace: never mutated, holds the leader lease, the rescheduler's bad-node records (no other namespace's ConfigMaps are ever read) and the self-managed Secret (default $POD_NAMESPACE, else trainguard-system)")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader so only one replica reconciles (set in the Helm chart)")
	fs.StringVar(&o.certSecret, "cert-secret", "trainguard-tls", "self-managed mode: Secret holding the CA and serving certificate")
	fs.StringVar(&o.webhookService, "webhook-service", "trainguard", "self-managed mode: Service name the serving certificate is issued for")
	fs.StringVar(&o.webhookConfigName, "webhook-config-name", "trainguard", "self-managed mode: name of the Mutating and Validating webhook configurations to inject the CA into")
	fs.BoolVar(&o.namespaceMirroring, "namespace-label-mirror", true, "reconcile the trainguard.io/inject label from the namespace annotation (catches namespaces annotated while trainguard was down)")
	fs.BoolVar(&o.printConfig, "print-config", false, "print the configuration in effect (the --config file, defaulted, with the flags given applied) as a Configuration on stdout, and exit")
	config.BindFlags(fs, o.settings)
	fs.SetNormalizeFunc(config.NormalizeFlagName)
	zfs := pflagFromZap(&o.zap)
	fs.AddFlagSet(zfs)
	return cmd
}

func runServe(ctx context.Context, o *serveOptions, flags *pflag.FlagSet) error {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	log := ctrl.Log.WithName("serve")
	if ctx == nil {
		ctx = context.Background()
	}
	if err := o.checkTimeouts(); err != nil {
		return exitWith(2, err.Error())
	}
	cfg, warnings, err := config.Load(o.configPath)
	if err != nil {
		return exitWith(2, err.Error())
	}
	for _, w := range warnings {
		log.Info("WARNING: "+w, "config", o.configPath)
	}
	if err := config.ApplyFlags(cfg, flags); err != nil {
		return exitWith(2, err.Error())
	}
	if o.printConfig {
		return printConfig(os.Stdout, cfg)
	}
	if o.certMode != server.CertModeFiles && o.certMode != server.CertModeSelfManaged {
		return exitWith(2, fmt.Sprintf("--cert-mode=%q: use %s or %s", o.certMode, server.CertModeFiles, server.CertModeSelfManaged))
	}
	if o.devCerts {
		if _, err := certs.EnsureDevCerts(o.certDir, certs.Options{DNSNames: devDNSNames(o), IPs: []net.IP{net.ParseIP("127.0.0.1")}}); err != nil {
			return fmt.Errorf("creating dev certificates: %w", err)
		}
		log.Info("using development certificates", "dir", o.certDir)
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	ctx = ctrlContext(ctx)
	mgr, err := server.New(ctx, restCfg, server.Options{
		Config: cfg, CertDir: o.certDir, CertMode: o.certMode, WebhookPort: o.webhookPort,
		MetricsAddr: o.metricsAddr, MetricsSecure: o.metricsSecure, ReadTimeout: o.readTimeout, WriteTimeout: o.writeTimeout,
		ReadHeaderTimeout: o.readHeaderTimeout, HandshakeTimeout: o.handshakeTimeout, MaxConnections: o.maxConnections, MaxConnectionsPerSource: o.maxPerSource, IdleTimeout: o.idleTimeout, Limits: o.limits, ProbeAddr: o.probeAddr, Namespace: o.namespace, LeaderElect: o.leaderElect,
		CertSecret: o.certSecret, WebhookService: o.webhookService, WebhookConfigName: o.webhookConfigName,
		NamespaceMirror: o.namespaceMirroring, Log: ctrl.Log,
	})
	if err != nil {
		return err
	}
	log.Info("starting trainguard", "webhookPort", o.webhookPort, "certMode", o.certMode, "clusterWide", cfg.ClusterWide, "rescheduler", *cfg.Rescheduler.Enabled)
	return mgr.Start(ctx)
}

// checkTimeouts refuses a negative connection timeout: net/http takes any
// value up to zero as no timeout at all, so -1s would quietly let a client
// hold a connection, its goroutine and its buffer for ever. Zero takes the
// default (server.WebhookServerOptions).
func (o *serveOptions) checkTimeouts() error {
	var problems []string
	for _, f := range []struct {
		flag string
		v    time.Duration
	}{
		{"webhook-read-timeout", o.readTimeout}, {"webhook-read-header-timeout", o.readHeaderTimeout}, {"webhook-handshake-timeout", o.handshakeTimeout},
		{"webhook-body-read-timeout", o.limits.BodyReadTimeout}, {"webhook-write-timeout", o.writeTimeout},
		{"webhook-idle-timeout", o.idleTimeout},
	} {
		if f.v < 0 {
			problems = append(problems, fmt.Sprintf("--%s=%s: must not be negative (0 takes the default)", f.flag, f.v))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid flags:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

func devDNSNames(o *serveOptions) []string {
	names := []string{"localhost"}
	if o.namespace != "" {
		names = append(names, o.webhookService+"."+o.namespace+".svc", o.webhookService+"."+o.namespace+".svc.cluster.local")
	}
	return names
}

func pflagFromZap(z *zap.Options) *pflag.FlagSet {
	gfs := flag.NewFlagSet("zap", flag.ContinueOnError)
	z.BindFlags(gfs)
	fs := pflag.NewFlagSet("zap", pflag.ContinueOnError)
	fs.AddGoFlagSet(gfs)
	return fs
}

// ownNamespaceDefault is $POD_NAMESPACE (the chart sets it from the
// downward API), else the namespace the chart's documentation installs into.
func ownNamespaceDefault() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "trainguard-system"
}
