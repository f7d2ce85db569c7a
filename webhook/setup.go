package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/validators"
)

// Endpoint paths, documented in docs/annotations.md and used by the chart.
// The job kinds' paths are MutatePath/ValidatePath of their GVK; these
// constants name them for readers and tests.
const (
	PathMutateKubeflowJob   = "/mutate-kubeflow-org-v1-pytorchjob"
	PathMutateKubeDLJob     = "/mutate-training-kubedl-io-v1alpha1-pytorchjob"
	PathMutatePod           = "/mutate-v1-pod"
	PathMutateNamespace     = "/mutate-v1-namespace"
	PathValidateKubeflowJob = "/validate-kubeflow-org-v1-pytorchjob"
	PathValidateKubeDLJob   = "/validate-training-kubedl-io-v1alpha1-pytorchjob"
	PathValidatePod         = "/validate-v1-pod"
	PathValidateNamespace   = "/validate-v1-namespace"
)

// Options configure the webhooks.
type Options struct {
	Config       *configv1alpha1.Configuration
	OwnNamespace string
	// Avoider feeds node anti-affinity from the rescheduler's record; may be nil.
	Avoider podspec.NodeAvoider
	// Kinds are the kinds served; nil means jobs.Builtin().
	Kinds *jobs.Kinds
	// TrainJobs reads TrainJobs for their pods; Setup fills it from the
	// manager's cache when nil.
	TrainJobs TrainJobLookup
	// Runtimes finds a TrainJob's runtime for validation; Setup reads live when nil.
	Runtimes validators.RuntimeLookup
}

// Server holds what every trainguard admission endpoint shares.
type Server struct {
	scope     *policy.Scope
	injector  *Injector
	validator *validators.Validator
	metrics   *admissionMetrics
	log       logr.Logger
	// durable records Events and metrics for non-durable checkpoints; nil records nothing.
	durable *durableReporter
	// audit records what audit mode let through; nil records nothing.
	audit *auditReporter
}

// NewServer builds the endpoints' shared state; lookup reads namespaces.
func NewServer(opts Options, lookup policy.NamespaceAnnotations, m *admissionMetrics, log logr.Logger) *Server {
	scope := policy.Scope{Config: opts.Config, OwnNamespace: opts.OwnNamespace, Namespaces: lookup}
	kinds := opts.Kinds
	if kinds == nil { // built once, not per request
		builtin := jobs.Builtin()
		kinds = &builtin
	}
	return &Server{
		scope:     &scope,
		injector:  &Injector{Scope: scope, Avoider: opts.Avoider, Kinds: kinds, TrainJobs: opts.TrainJobs},
		validator: withRuntimes(validators.New(opts.Config).WithKinds(kinds), opts.Runtimes, opts.TrainJobs),
		metrics:   m,
		log:       log,
	}
}

// Setup registers every trainguard webhook on the manager's webhook server.
func Setup(mgr ctrl.Manager, opts Options) error {
	m, err := newAdmissionMetrics(metrics.Registry)
	if err != nil {
		return err
	}
	// Register the namespace informer now, so it starts and syncs with the
	// cache instead of on the first admission request.
	if _, err := mgr.GetCache().GetInformer(context.Background(), namespaceMeta()); err != nil {
		return fmt.Errorf("registering the namespace informer: %w", err)
	}
	if opts.TrainJobs == nil {
		opts.TrainJobs = setupTrainJobs(mgr)
	}
	if opts.Runtimes == nil {
		opts.Runtimes = LiveRuntimes(mgr.GetAPIReader())
	}
	s := NewServer(opts, CachedNamespaces(mgr.GetCache(), mgr.GetAPIReader()), m, mgr.GetLogger().WithName("webhook"))
	if s.durable, err = newDurableReporter(metrics.Registry, mgr.GetEventRecorder("trainguard-webhook")); err != nil {
		return err
	}
	if s.audit, err = newAuditReporter(metrics.Registry, mgr.GetEventRecorder("trainguard-webhook")); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("informers-synced", cacheSynced(mgr.GetCache())); err != nil {
		return fmt.Errorf("adding readyz: %w", err)
	}
	hooks := mgr.GetWebhookServer()
	for path, h := range s.Handlers() {
		hooks.Register(path, h)
	}
	return nil
}

// Handlers maps every endpoint path to its handler: a mutating and a
// validating endpoint per kind (named after its GVK, as kubebuilder names
// them), plus the Namespace endpoints.
func (s *Server) Handlers() map[string]http.Handler {
	h := map[string]http.Handler{
		PathMutateNamespace:   s.handler("mutate-namespace", s.mirrorNamespaceLabel),
		PathValidateNamespace: s.handler("validate-namespace", s.validate(namespaceGVK())),
	}
	for _, a := range s.injector.kinds().All() {
		h[MutatePath(a.GVK)] = s.handler("mutate-"+a.Name, s.mutate(a.GVK))
		h[ValidatePath(a.GVK)] = s.handler("validate-"+a.Name, s.validate(a.GVK))
	}
	return h
}

// MutatePath is the mutating endpoint of a kind: /mutate-<group>-<version>-<kind>,
// dots in the group as dashes, the core group left out.
func MutatePath(gvk schema.GroupVersionKind) string { return "/mutate-" + pathSuffix(gvk) }

// ValidatePath is the validating endpoint of a kind (see MutatePath).
func ValidatePath(gvk schema.GroupVersionKind) string { return "/validate-" + pathSuffix(gvk) }

func pathSuffix(gvk schema.GroupVersionKind) string {
	s := strings.ToLower(gvk.Version + "-" + gvk.Kind)
	if gvk.Group != "" {
		s = strings.ReplaceAll(gvk.Group, ".", "-") + "-" + s
	}
	return s
}

func namespaceGVK() schema.GroupVersionKind { return corev1.SchemeGroupVersion.WithKind("Namespace") }

func (s *Server) handler(name string, admit admitFunc) http.Handler {
	return &reviewHandler{name: name, admit: s.metrics.instrument(name, admit), log: s.log.WithValues("webhook", name)}
}

// CachedNamespaces reads namespace annotations from the manager's informer
// (metadata only), so the webhook makes no API call per request. Only on a
// cache miss does it ask the API server (live): a job applied together with
// its namespace (kubectl apply -f dir/) can arrive before the informer has
// seen the namespace, and must not be skipped for that.
func CachedNamespaces(cached, live client.Reader) policy.NamespaceAnnotations {
	return func(ctx context.Context, name string) (map[string]string, bool, error) {
		ns := namespaceMeta()
		err := cached.Get(ctx, types.NamespacedName{Name: name}, ns)
		if apierrors.IsNotFound(err) && live != nil {
			err = live.Get(ctx, types.NamespacedName{Name: name}, ns)
		}
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("reading namespace: %w", err)
		}
		ann := ns.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		return ann, true, nil
	}
}

// namespaceMeta is the metadata-only Namespace the webhook reads: it needs
// only annotations, and metadata informers keep far less in memory.
func namespaceMeta() *metav1.PartialObjectMetadata {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return ns
}

// cacheSynced keeps the pod out of the Service until its informers have
// synced: before that, every namespace would look unknown.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(*http.Request) error {
		// A short wait, not a cancelled context: the cache reports "not
		// started" at random whenever the context is already done.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return fmt.Errorf("informers have not synced yet")
		}
		return nil
	}
}
