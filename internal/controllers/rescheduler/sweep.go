package rescheduler

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// sweepInterval is how often the leader looks for records of jobs that are
// gone. Records cannot be owned by their job (it lives in another
// namespace), so the garbage collector does not remove them.
const sweepInterval = 10 * time.Minute

// sweeper deletes the records of jobs (and bare pods) that no longer exist.
// It runs on the leader only.
type sweeper struct{ r *Reconciler }

func (s *sweeper) NeedLeaderElection() bool { return true }

func (s *sweeper) Start(ctx context.Context) error {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.r.sweep(ctx)
		}
	}
}

// sweep walks the records once. Records it cannot judge are left alone.
func (r *Reconciler) sweep(ctx context.Context) {
	var list corev1.ConfigMapList
	if err := r.client.List(ctx, &list, client.InNamespace(r.namespace), client.MatchingLabels{contract.LabelBadNodes: "true"}); err != nil {
		log.FromContext(ctx).Error(err, "sweeping bad-node records")
		return
	}
	for i := range list.Items {
		cm := &list.Items[i]
		key, ok := jobs.ParseKey(cm.Data[dataJob], cm.Data[dataAPIVersion])
		if !ok {
			continue
		}
		rec, err := decodeRecord(cm, key)
		if err != nil || rec.Stash != nil {
			continue
		}
		if r.jobExists(ctx, key, rec.JobUID) {
			continue
		}
		err = r.client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.FromContext(ctx).Error(err, "deleting the record of a gone job", "job", key.String())
			continue
		}
		log.FromContext(ctx).Info("deleted the bad-node record of a job that is gone", "job", key.String(), "configMap", cm.Name)
	}
}

// jobExists says whether the job (with that UID, when known) still exists;
// when in doubt (an error, the CRD missing), it says yes.
func (r *Reconciler) jobExists(ctx context.Context, key jobs.Key, uid types.UID) bool {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(schema.FromAPIVersionAndKind(key.APIVersion, key.Kind))
	err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		return true
	}
	return uid == "" || obj.UID == uid
}
