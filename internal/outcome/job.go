package outcome

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// jobKinds are the owners that get the Event too: the job kinds trainguard
// injects. Any other owner (a ReplicaSet, a bare JobSet) gets none.
func jobKinds() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{
		{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
		{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"},
	}
}

// trainJobChain is how a Kubeflow Trainer v2 pod reaches its TrainJob: the
// pod's controller is a batch Job, whose controller is a JobSet, whose
// controller is the TrainJob, the one that gets the Event. Fixed kinds and
// three hops, so a tenant's owner references cannot lead anywhere else.
func trainJobChain() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{
		{Group: "batch", Version: "v1", Kind: "Job"},
		{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"},
		{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"},
	}
}

// job returns the pod's job, a PyTorchJob or, through its Job and JobSet, a
// TrainJob, or nil. Owner references are part of objects the tenant wrote:
// they may name a job that does not exist or another one, so every hop
// follows the controller reference only, in the pod's own namespace, and
// only to a live object with the very UID the reference names.
func (r *Reconciler) job(ctx context.Context, it item) *metav1.PartialObjectMetadata {
	if it.Owner.Name == "" {
		return nil
	}
	gvk := schema.FromAPIVersionAndKind(it.Owner.APIVersion, it.Owner.Kind)
	if slices.Contains(jobKinds(), gvk) {
		return r.owner(ctx, it.Namespace, it.Owner)
	}
	chain := trainJobChain()
	if gvk != chain[0] {
		return nil
	}
	obj := r.owner(ctx, it.Namespace, it.Owner)
	for _, next := range chain[1:] {
		if obj == nil {
			return nil
		}
		ref := metav1.GetControllerOf(obj)
		if ref == nil || schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind) != next {
			return nil
		}
		obj = r.owner(ctx, it.Namespace, *ref)
	}
	return obj
}

// owner reads the metadata of the object ref names in namespace, or nil when
// it is not there or has another UID.
func (r *Reconciler) owner(ctx context.Context, namespace string, ref metav1.OwnerReference) *metav1.PartialObjectMetadata {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, obj); err != nil {
		logger := log.FromContext(ctx).WithValues("owner", gvk.Kind+"/"+namespace+"/"+ref.Name)
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err) || meta.IsNoMatchError(err):
			// The chart grants reading Jobs and JobSets only with Trainer
			// support, and JobSet may not be installed: a pod of a plain
			// Job is then simply not a TrainJob's.
			logger.V(1).Info("cannot read the owner of a checkpoint outcome's pod; only the pod gets the Event", "reason", err.Error())
		default:
			logger.Error(err, "reading the owner of a checkpoint outcome's pod; only the pod gets the Event")
		}
		return nil
	}
	if obj.UID != ref.UID {
		return nil
	}
	// The API server's answer may omit TypeMeta; the Event's reference needs it.
	obj.SetGroupVersionKind(gvk)
	return obj
}
