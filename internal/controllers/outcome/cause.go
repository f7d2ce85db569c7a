package outcome

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/controllers/ownerchain"
)

// Causes: why the pod was stopped, the `cause` label of the checkpoint
// metrics. A fixed set, so the label stays bounded whatever a pod says.
const (
	CausePreemption = "preemption" // kube-scheduler made room for a higher-priority pod, or Kueue suspended the job
	CauseEviction   = "eviction"   // Eviction API (a drain, trainguard's rescheduler) or the kubelet (node pressure, shutdown)
	CauseNodeLost   = "node-lost"  // the node is gone: taint manager, pod GC, trainguard's node-lost deletion
	CauseSuspension = "suspension" // the job was suspended outside Kueue
	CauseDeletion   = "deletion"   // the pod was deleted, nothing says by what
	CauseUnknown    = "unknown"    // the pod is not being deleted (a container restart) or the reason is not one of these
)

// Causes lists every cause, in the documented order.
func Causes() []string {
	return []string{CausePreemption, CauseEviction, CauseNodeLost, CauseSuspension, CauseDeletion, CauseUnknown}
}

// KueueQueueLabel names the LocalQueue of a job Kueue manages.
const KueueQueueLabel = "kueue.x-k8s.io/queue-name"

// DisruptionTarget reasons the control plane sets before it deletes a pod
// (k8s.io/kubernetes, not in k8s.io/api), and trainguard's own.
const (
	reasonEvictionAPI      = "EvictionByEvictionAPI"
	reasonTaintManager     = "DeletionByTaintManager"
	reasonPodGC            = "DeletionByPodGC"
	reasonTrainguardNodeGC = "DeletionByTrainguardNodeLost" // internal/controllers/rescheduler.ReasonNodeLostDisruption
)

// stopCause is why the pod stopped: the metric's label and the words the
// Event adds ("" adds none).
type stopCause struct {
	cause, words string
}

// disruptionCauses maps a DisruptionTarget reason to its cause.
var disruptionCauses = map[string]stopCause{
	corev1.PodReasonPreemptionByScheduler: {CausePreemption, "the pod was preempted by kube-scheduler (a higher-priority pod needed its node)"},
	reasonEvictionAPI:                     {CauseEviction, "the pod was evicted through the Eviction API (a node drain, or trainguard's rescheduler)"},
	corev1.PodReasonTerminationByKubelet:  {CauseEviction, "the pod was stopped by its kubelet (node-pressure eviction or node shutdown)"},
	reasonTaintManager:                    {CauseNodeLost, "the pod was deleted by the taint manager (a NoExecute taint on its node, e.g. unreachable)"},
	reasonPodGC:                           {CauseNodeLost, "the pod was deleted by the pod garbage collector (its node is gone or out of service)"},
	reasonTrainguardNodeGC:                {CauseNodeLost, "the pod was deleted by trainguard's rescheduler: its node is lost"},
}

// disruption returns the reason of the pod's DisruptionTarget condition
// when it is true, "" otherwise.
func disruption(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// causeOf decides why the pod stopped: its DisruptionTarget condition
// first (the component that stopped it said so), then a suspended job
// (Kueue preempts by suspending; so does a user), then a deletion.
func (r *Reconciler) causeOf(ctx context.Context, it item) stopCause {
	if c, ok := disruptionCauses[it.Disruption]; ok {
		return c
	}
	if it.Disruption != "" {
		return stopCause{CauseUnknown, fmt.Sprintf("the pod was disrupted (DisruptionTarget %q)", truncate(it.Disruption, 63))}
	}
	suspended, queue := r.suspended(ctx, it)
	switch {
	case suspended && queue != "":
		return stopCause{CausePreemption, fmt.Sprintf("the job was preempted by Kueue (LocalQueue %q; the job was suspended)", queue)}
	case suspended:
		return stopCause{CauseSuspension, "the job was suspended"}
	case it.Deleting:
		return stopCause{CauseDeletion, "the pod was deleted"}
	}
	return stopCause{CauseUnknown, ""}
}

// suspended reports whether a job on the pod's controller chain is
// suspended, and the Kueue queue named on the chain or the pod. A lookup
// error is logged by the caller's logger and counts as not suspended.
func (r *Reconciler) suspended(ctx context.Context, it item) (bool, string) {
	if it.Owner.Name == "" {
		return false, it.Queue
	}
	s, queue, err := suspendedOnChain(ctx, r.apiReader, it.Namespace, it.Owner)
	if err != nil {
		logFor(ctx, it).V(1).Info("cannot tell whether the pod's job is suspended", "reason", err.Error())
	}
	if queue == "" {
		queue = it.Queue
	}
	return s, queue
}

// suspendPaths are the kinds whose suspension stops a training pod and
// where each says so. They are the kinds of ownerchain, plus a plain batch Job.
var suspendPaths = map[schema.GroupVersionKind][]string{
	{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}:             {"spec", "runPolicy", "suspend"},
	{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"}: {"spec", "runPolicy", "suspend"},
	{Group: "batch", Version: "v1", Kind: "Job"}:                           {"spec", "suspend"},
	{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}:        {"spec", "suspend"},
	{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}: {"spec", "suspend"},
}

// suspendedOnChain follows controller references as ownerchain does (known
// kinds only, the pod's namespace, the very UID each reference names, the
// TrainJob chain's order, at most three hops) and reads each hop's
// suspend field and Kueue queue label.
func suspendedOnChain(ctx context.Context, r client.Reader, ns string, ref metav1.OwnerReference) (bool, string, error) {
	suspended, queue := false, ""
	chain := ownerchain.TrainJobChain()
	for hop := 0; hop < len(chain); hop++ {
		gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
		path, known := suspendPaths[gvk]
		if !known {
			return suspended, queue, nil
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, obj); err != nil {
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
				return suspended, queue, nil
			}
			return suspended, queue, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, ns, ref.Name, err)
		}
		if obj.GetUID() != ref.UID {
			return suspended, queue, nil
		}
		if s, _, _ := unstructured.NestedBool(obj.Object, path...); s {
			suspended = true
		}
		if q := obj.GetLabels()[KueueQueueLabel]; q != "" {
			queue = q
		}
		next := metav1.GetControllerOf(obj)
		if next == nil || hop+1 >= len(chain) || gvk != chain[hop] ||
			schema.FromAPIVersionAndKind(next.APIVersion, next.Kind) != chain[hop+1] {
			return suspended, queue, nil
		}
		ref = *next
	}
	return suspended, queue, nil
}

// truncate cuts a tenant-written string for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
