package outcome

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// jobKinds are the owners that get the Event too: the job kinds trainguard
// injects. Any other owner (a ReplicaSet, a JobSet) gets none.
func jobKinds() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{
		{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
		{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"},
	}
}

// job returns the pod's owning job, read from the API server and checked
// against the owner reference's UID, or nil. The owner reference is part of
// the pod, which the tenant wrote: it may name a job that does not exist or
// another job, so only a live job with the very UID the pod names gets an
// Event, and it is always in the pod's own namespace.
func (r *Reconciler) job(ctx context.Context, it item) *metav1.PartialObjectMetadata {
	if it.Owner.Name == "" {
		return nil
	}
	gv, err := schema.ParseGroupVersion(it.Owner.APIVersion)
	if err != nil {
		return nil
	}
	gvk := gv.WithKind(it.Owner.Kind)
	known := false
	for _, k := range jobKinds() {
		known = known || k == gvk
	}
	if !known {
		return nil
	}
	job := &metav1.PartialObjectMetadata{}
	job.SetGroupVersionKind(gvk)
	if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: it.Namespace, Name: it.Owner.Name}, job); err != nil {
		if !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Error(err, "reading the job of a checkpoint outcome; only the pod gets the Event",
				"job", gvk.Kind+"/"+it.Namespace+"/"+it.Owner.Name)
		}
		return nil
	}
	if job.UID != it.Owner.UID {
		return nil
	}
	// The API server's answer may omit TypeMeta; the Event's reference needs it.
	job.SetGroupVersionKind(gvk)
	return job
}
