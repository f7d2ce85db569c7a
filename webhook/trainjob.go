package webhook

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/validators"
)

// TrainJobLookup returns the annotations of TrainJob name in namespace
// (policy.TrainJobLookup).
type TrainJobLookup = policy.TrainJobLookup

// resolvePolicy is the effective policy of a job: its layer (policy.LayerOf:
// a pod of a TrainJob takes its TrainJob's annotations, the TrainJob's
// opt-out included, and Trainer's trainer container name); skip says why
// such a pod is left alone.
func (i *Injector) resolvePolicy(ctx context.Context, a *jobs.Adapter, job jobs.Job, nsAnn map[string]string, namespace string) (*contract.Policy, []string, string, error) {
	layer, err := policy.LayerOf(ctx, a, job, namespace, i.TrainJobs)
	if err != nil {
		return nil, nil, "", err
	}
	if layer.TrainJobOptedOut {
		return nil, nil, "pod of TrainJob " + layer.TrainJob + ", which opted out with " + contract.AnnotationInject + "=" + contract.InjectDisabled, nil
	}
	p, warnings := policy.Resolve(i.Config, nsAnn, layer.Annotations)
	layer.Apply(p)
	return p, warnings, "", nil
}

// CachedTrainJobs reads TrainJob metadata from the manager's cache and, on a
// miss, once from the API server: the Job controller can create a pod
// before the informer has seen its brand-new TrainJob. When Trainer is not
// installed (no such kind), every pod is simply not a TrainJob pod.
func CachedTrainJobs(cached, live client.Reader) TrainJobLookup {
	return func(ctx context.Context, namespace, name string) (map[string]string, bool, error) {
		tj := trainJobMeta()
		key := types.NamespacedName{Namespace: namespace, Name: name}
		err := cached.Get(ctx, key, tj)
		if (apierrors.IsNotFound(err) || meta.IsNoMatchError(err)) && live != nil {
			err = live.Get(ctx, key, tj)
		}
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		return tj.GetAnnotations(), true, nil
	}
}

// trainJobMeta is the metadata-only TrainJob the webhook reads.
func trainJobMeta() *metav1.PartialObjectMetadata {
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind))
	return tj
}

// rememberTrainJob records a TrainJob document's annotations for the pods
// that follow it in the stream (`trainguard inject`).
func (o *Offline) rememberTrainJob(h jobs.Header) {
	ann := h.Metadata.Annotations
	if ann == nil {
		ann = map[string]string{}
	}
	o.trainJobs[h.Metadata.Namespace+"/"+h.Metadata.Name] = ann
}

// trainJob is the offline TrainJobLookup: the TrainJob's annotations when
// it appeared earlier in the input; otherwise the TrainJob is taken to
// exist without annotations, as `trainguard inject` treats every input as
// the user's own and opted in.
func (o *Offline) trainJob(_ context.Context, namespace, name string) (map[string]string, bool, error) {
	if ann, ok := o.trainJobs[namespace+"/"+name]; ok {
		return ann, true, nil
	}
	return map[string]string{}, true, nil
}

// setupTrainJobs registers the TrainJob metadata informer when Trainer's
// CRD is installed, so it syncs with the cache instead of on the first pod;
// without the CRD, reads go to the API server (and find no such kind).
// Without the right to list TrainJobs (the chart grants it only when the CRD
// exists at install time) an informer would never sync and keep trainguard
// unready, so TrainJob pods are then not recognised, and the log says so.
func setupTrainJobs(mgr ctrl.Manager) TrainJobLookup {
	log := mgr.GetLogger().WithName("webhook")
	gvk := trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind)
	if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		log.Info("Kubeflow Trainer v2 is not installed: TrainJob pods are looked up live if it appears", "reason", err.Error())
		return CachedTrainJobs(mgr.GetAPIReader(), nil)
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind + "List"))
	if err := mgr.GetAPIReader().List(context.Background(), list, client.Limit(1)); err != nil {
		log.Error(err, "cannot list TrainJobs: TrainJob pods will not be injected; install the chart with Trainer's CRDs present (or trainer.enabled=true)")
		return nil
	}
	if _, err := mgr.GetCache().GetInformer(context.Background(), trainJobMeta()); err != nil {
		log.Error(err, "registering the TrainJob informer; reading TrainJobs live")
		return CachedTrainJobs(mgr.GetAPIReader(), nil)
	}
	return CachedTrainJobs(mgr.GetCache(), mgr.GetAPIReader())
}

// LiveRuntimes reads a TrainJob's runtime from the API server. It runs once
// per TrainJob admission (TrainJobs are created rarely, unlike pods), so
// trainguard keeps no cache of every runtime's JobSet template. A
// ClusterTrainingRuntime is read cluster-wide; a TrainingRuntime only in
// the TrainJob's own namespace.
func LiveRuntimes(live client.Reader) validators.RuntimeLookup {
	return func(namespace, kind, name string) (*trainerv1alpha1.TrainingRuntimeSpec, bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), runtimeReadTimeout)
		defer cancel()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(trainerv1alpha1.GroupVersion.WithKind(kind))
		key := types.NamespacedName{Name: name}
		if kind == trainerv1alpha1.TrainingRuntimeKind {
			key.Namespace = namespace
		}
		err := live.Get(ctx, key, u)
		switch {
		case apierrors.IsNotFound(err):
			return nil, true, nil
		case err != nil:
			return nil, false, err
		}
		raw, err := u.MarshalJSON()
		if err != nil {
			return nil, false, err
		}
		var rt trainerv1alpha1.TrainingRuntime
		if err := jobs.Decode(raw, &rt); err != nil {
			return nil, false, fmt.Errorf("decoding %s %s: %w", kind, name, err)
		}
		return &rt.Spec, true, nil
	}
}

// runtimeReadTimeout bounds the runtime read well inside the webhook's
// own timeout.
const runtimeReadTimeout = 3 * time.Second

func withRuntimes(v *validators.Validator, rt validators.RuntimeLookup, tj TrainJobLookup) *validators.Validator {
	v.Runtimes = rt
	if tj != nil {
		v.TrainJobs = func(namespace, name string) (map[string]string, bool, error) {
			ctx, cancel := context.WithTimeout(context.Background(), runtimeReadTimeout)
			defer cancel()
			return tj(ctx, namespace, name)
		}
	}
	return v
}
