package rescheduler

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// jobOf returns the job whose policy annotations apply to the pod and that
// is marked at the reschedule cap: a PyTorchJob, or a TrainJob reached
// through its Job and JobSet (ownerchain.Chains.Job). Only the pod's controller
// reference is followed, only to those kinds, in the pod's namespace and
// to the UID it names: an owner reference is the tenant's to write, and
// may name a Namespace or trainguard's own webhook configuration, which
// are never read or patched. nil for a bare pod or any other owner.
func (r *Reconciler) jobOf(ctx context.Context, pod *corev1.Pod) (*metav1.PartialObjectMetadata, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return nil, nil
	}
	return r.chains.Job(ctx, r.apiReader, pod.Namespace, *ref)
}

// jobAnnotations reads the pod's job's annotations, uncached; nil when
// there is no job or it cannot be read (reported: the pod's annotations
// and the config then apply).
func (r *Reconciler) jobAnnotations(ctx context.Context, pod *corev1.Pod) map[string]string {
	job, err := r.jobOf(ctx, pod)
	if err != nil {
		r.jobNotAccessible(ctx, pod, "read the policy annotations of the pod's job", err)
		return nil
	}
	if job == nil {
		return nil
	}
	return job.GetAnnotations()
}

// markExhausted annotates the pod's job (a bare pod: the pod) whose cap is
// reached. No job, a job gone or an API not installed is not an error, and
// neither is a patch RBAC forbids: that is reported once (Event and log)
// and the pod's decision annotation still stops the reconciles; retrying
// would fail the same way forever.
func (r *Reconciler) markExhausted(ctx context.Context, pod *corev1.Pod, key jobs.Key, reschedules int) error {
	target := &unstructured.Unstructured{}
	if key.Bare() {
		target.SetAPIVersion("v1")
		target.SetKind("Pod")
		target.SetNamespace(pod.Namespace)
		target.SetName(pod.Name)
		target.SetUID(pod.UID)
	} else {
		job, err := r.jobOf(ctx, pod)
		if err != nil {
			return r.markFailedOn(ctx, pod, err)
		}
		if job == nil {
			log.FromContext(ctx).Info("no job to mark at the reschedule cap; the pod's Event says it", "pod", klogRef(pod), "job", key.String())
			return nil
		}
		target.SetGroupVersionKind(job.GroupVersionKind())
		target.SetNamespace(job.Namespace)
		target.SetName(job.Name)
		target.SetUID(job.UID)
	}
	patch, err := capPatch(target.GetUID(), fmt.Sprint(reschedules))
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return r.markFailedOn(ctx, pod, fmt.Errorf("annotating %s %s/%s: %w", target.GetKind(), target.GetNamespace(), target.GetName(), err))
	}
	return nil
}

// markFailedOn sorts a failure to mark the job: gone or not installed is
// logged, Forbidden reported, anything else retried.
func (r *Reconciler) markFailedOn(ctx context.Context, pod *corev1.Pod, err error) error {
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || apierrors.IsConflict(err):
		log.FromContext(ctx).Info("cannot mark the job at the reschedule cap", "pod", klogRef(pod), "error", err.Error())
		return nil
	case apierrors.IsForbidden(err):
		r.jobNotAccessible(ctx, pod, "mark the pod's job "+contract.AnnotationReschedulesExhausted, err)
		return nil
	}
	return err
}

// jobNotAccessible reports, on the pod, what trainguard may not do to its
// job, and how to allow it.
func (r *Reconciler) jobNotAccessible(ctx context.Context, pod *corev1.Pod, what string, err error) {
	r.metrics.errorsByOp.WithLabelValues("job-access").Inc()
	msg := fmt.Sprintf("trainguard cannot %s: %v; the pod's annotations and the config apply. "+
		"If it is a TrainJob, grant trainguard get and patch on trainjobs.trainer.kubeflow.org (the chart does with Trainer support)", what, err)
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonJobNotAccessible, "Annotate", "%s", msg)
	log.FromContext(ctx).Info("job not accessible", "pod", klogRef(pod), "error", err.Error(), "wanted", what)
}

// capPatch sets the cap annotation, with the job's UID as a precondition:
// a job deleted and recreated under the same name since it was read is not
// marked.
func capPatch(uid types.UID, v string) ([]byte, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": uid, "annotations": map[string]string{contract.AnnotationReschedulesExhausted: v},
	}})
	if err != nil {
		return nil, fmt.Errorf("encoding annotation patch: %w", err)
	}
	return patch, nil
}
