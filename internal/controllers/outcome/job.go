package outcome

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// job returns the pod's job, a PyTorchJob or, through its Job and JobSet, a
// TrainJob, or nil (see ownerchain.Chains.Job: controller references only, in the
// pod's own namespace, to the very UID each names). Any other owner (a
// ReplicaSet, a bare JobSet) gets no Event.
func (r *Reconciler) job(ctx context.Context, it item) *metav1.PartialObjectMetadata {
	if it.Owner.Name == "" {
		return nil
	}
	obj, err := r.chains.Job(ctx, r.apiReader, it.Namespace, it.Owner)
	if err != nil {
		logger := log.FromContext(ctx).WithValues("owner", it.Owner.Kind+"/"+it.Namespace+"/"+it.Owner.Name)
		if apierrors.IsForbidden(err) {
			// The chart grants reading Jobs and JobSets only with Trainer
			// support: a pod of a plain Job is then simply not a TrainJob's.
			logger.V(1).Info("cannot read the owner of a checkpoint outcome's pod; only the pod gets the Event", "reason", err.Error())
		} else {
			logger.Error(err, "reading the owner of a checkpoint outcome's pod; only the pod gets the Event")
		}
	}
	return obj
}
