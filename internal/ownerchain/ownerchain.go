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
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// JobKinds are the jobs a pod's controller reference may name directly:
// the PyTorchJob kinds trainguard injects.
func JobKinds() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{
		{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
		{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"},
	}
}

// TrainJobChain is how a Kubeflow Trainer v2 pod reaches its TrainJob: the
// pod's controller is a batch Job, whose controller is a JobSet, whose
// controller is the TrainJob. Fixed kinds and three hops, so a tenant's
// owner references cannot lead anywhere else.
func TrainJobChain() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{
		{Group: "batch", Version: "v1", Kind: "Job"},
		{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"},
		{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"},
	}
}

// Job returns the metadata of the job ref (a pod's controller reference)
// leads to: a PyTorchJob, or through its Job and JobSet a TrainJob. It is
// nil, with no error, when ref names another kind, or a hop is missing, has
// another UID or another controller, or its API is not installed. An error
// is one the caller should report: Forbidden (RBAC lacks a hop) or the API
// server's failure; it names the hop.
func Job(ctx context.Context, r client.Reader, namespace string, ref metav1.OwnerReference) (*metav1.PartialObjectMetadata, error) {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	if slices.Contains(JobKinds(), gvk) {
		return get(ctx, r, namespace, ref)
	}
	chain := TrainJobChain()
	if gvk != chain[0] {
		return nil, nil
	}
	obj, err := get(ctx, r, namespace, ref)
	for _, next := range chain[1:] {
		if obj == nil || err != nil {
			return nil, err
		}
		ctrl := metav1.GetControllerOf(obj)
		if ctrl == nil || schema.FromAPIVersionAndKind(ctrl.APIVersion, ctrl.Kind) != next {
			return nil, nil
		}
		obj, err = get(ctx, r, namespace, *ctrl)
	}
	return obj, err
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
