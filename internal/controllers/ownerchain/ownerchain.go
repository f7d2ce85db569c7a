// Package ownerchain finds the training job a pod belongs to by following
// controller owner references, which are part of objects a tenant writes:
// only to kinds trainguard knows, only in the pod's own namespace, and only
// to a live object with the very UID the reference names. The checkpoint
// outcome reader (its Events) and the rescheduler (a job's policy
// annotations and its reschedule-cap mark) share it, so both reach the same
// job and nothing else.
package ownerchain

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/jobs"
)

// chain is one kind's owner chain (jobs.Adapter.PodOwnerChain); uncontrolled:
// the job it ends at is the kind's only when nothing controls it
// (jobs.Adapter.UncontrolledOnly: a batch Job a CronJob made is not a job).
type chain struct {
	kinds        []schema.GroupVersionKind
	uncontrolled bool
}

// Chains are the owner chains of a set of kinds, each its adapter declares
// (jobs.Adapter.PodOwnerChain): fixed kinds and hops, so a tenant's owner
// references cannot lead anywhere else. Several may start at one kind (a
// batch Job: a TrainJob's first hop, or the job itself); the longer,
// registered first, is tried first. Build it once (New) from the kinds
// the process serves.
type Chains struct{ chains []chain }

// New returns the owner chains of kinds.
func New(kinds jobs.Kinds) Chains {
	var c Chains
	for _, a := range kinds.All() {
		if len(a.PodOwnerChain) > 0 {
			c.chains = append(c.chains, chain{kinds: a.PodOwnerChain, uncontrolled: a.UncontrolledOnly})
		}
	}
	return c
}

// TrainJobChain is how a Kubeflow Trainer v2 pod reaches its TrainJob: the
// pod's controller is a batch Job, whose controller is a JobSet, whose
// controller is the TrainJob.
func TrainJobChain() []schema.GroupVersionKind { return jobs.TrainJob().PodOwnerChain }

// Job returns the metadata of the job ref (a pod's controller reference)
// leads to along one of the chains: a PyTorchJob, a plain batch Job, or
// through its Job and JobSet a TrainJob. It is nil, with no error, when ref names another kind, or a
// hop is missing, has another UID or another controller, or its API is not
// installed, or the batch Job is another controller's (a CronJob's). An
// error is one the caller should report: Forbidden (RBAC lacks a hop) or
// the API server's failure; it names the hop.
func (cs Chains) Job(ctx context.Context, r client.Reader, namespace string, ref metav1.OwnerReference) (*metav1.PartialObjectMetadata, error) {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	var first *metav1.PartialObjectMetadata
	fetched := false
	for _, c := range cs.chains {
		if c.kinds[0] != gvk {
			continue
		}
		if !fetched {
			var err error
			if first, err = get(ctx, r, namespace, ref); err != nil || first == nil {
				return nil, err
			}
			fetched = true
		}
		obj, err := follow(ctx, r, namespace, first, c.kinds[1:])
		if err != nil {
			return nil, err
		}
		if obj == nil || (c.uncontrolled && metav1.GetControllerOf(obj) != nil) {
			continue
		}
		return obj, nil
	}
	return nil, nil
}

// follow walks obj's controller references through the hops.
func follow(ctx context.Context, r client.Reader, namespace string, obj *metav1.PartialObjectMetadata, hops []schema.GroupVersionKind) (*metav1.PartialObjectMetadata, error) {
	for _, next := range hops {
		ctrl := metav1.GetControllerOf(obj)
		if ctrl == nil || schema.FromAPIVersionAndKind(ctrl.APIVersion, ctrl.Kind) != next {
			return nil, nil
		}
		var err error
		if obj, err = get(ctx, r, namespace, *ctrl); obj == nil || err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// get reads the metadata of the object ref names in namespace, or nil when
// it is not there, has another UID or its API is not installed.
func get(ctx context.Context, r client.Reader, namespace string, ref metav1.OwnerReference) (*metav1.PartialObjectMetadata, error) {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, namespace, ref.Name, err)
	}
	if obj.UID != ref.UID {
		return nil, nil
	}
	// The API server's answer may omit TypeMeta; callers need it.
	obj.SetGroupVersionKind(gvk)
	return obj, nil
}
