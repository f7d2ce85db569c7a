package boost

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// saturateAfter: work at risk of 10 minutes or more gets the full boost.
const saturateAfter = 10 * time.Minute

// ParamsFrom turns the configuration into the policy's knobs.
func ParamsFrom(cfg *configv1alpha1.Configuration) Params {
	b := cfg.WithDefaults().PriorityBoost
	return Params{
		Enabled: b.Enabled, MaxBoost: *b.MaxBoost, SaturateAfter: saturateAfter,
		Hysteresis: max(*b.MaxBoost/10, 1), MinInterval: b.MinInterval.Duration,
	}
}

// Setup adds the controller to the leader, when the rescheduler runs (it
// shares its pod cache) and Kueue's Workload API is served. Without the
// configuration's priorityBoost.enabled it still computes and exports the
// work at risk, and writes nothing. kinds are the job kinds served.
func Setup(mgr ctrl.Manager, cfg *configv1alpha1.Configuration, kinds jobs.Kinds, ownNamespace string, enabled bool) error {
	lg := mgr.GetLogger().WithName("priority-boost")
	if !enabled {
		return nil
	}
	if _, err := mgr.GetRESTMapper().RESTMapping(WorkloadGVK.GroupKind(), WorkloadGVK.Version); err != nil {
		if meta.IsNoMatchError(err) {
			lg.Info("Kueue's Workload API (kueue.x-k8s.io/v1beta2) is not served: no work at risk, no priority boost")
			return nil
		}
		return fmt.Errorf("looking up Kueue's Workload API: %w", err)
	}
	p := ParamsFrom(cfg)
	if !p.Enabled {
		lg.Info("priority boost off: Kueue ignores " + Annotation + " unless its PriorityBoost feature gate (alpha) is on; " +
			"work at risk is exported but no Workload is annotated. Set priorityBoost.enabled=true once Kueue runs with " +
			"--feature-gates=PriorityBoost=true (docs/preemption.md)")
	} else {
		lg.Info("priority boost on", "maxBoost", p.MaxBoost, "minInterval", p.MinInterval.String())
	}
	m, err := NewMetrics(crmetrics.Registry)
	if err != nil {
		return err
	}
	r := &Reconciler{
		Client: mgr.GetClient(), Params: p, Fetch: trainerstatus.HTTPFetcher(), Clock: clock.RealClock{}, Metrics: m, Kinds: kinds,
		Scope: &policy.Scope{Config: cfg, OwnNamespace: ownNamespace, Namespaces: policy.ClientNamespaces(mgr.GetClient())},
	}
	wl := &unstructured.Unstructured{}
	wl.SetGroupVersionKind(WorkloadGVK)
	return ctrl.NewControllerManagedBy(mgr).Named("priority-boost").For(wl).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).Complete(r)
}
