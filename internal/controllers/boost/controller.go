package boost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// Annotation is Kueue's (KEP-7990): a signed integer added to the
// Workload's priority.
const Annotation = "kueue.x-k8s.io/priority-boost"

// Kueue's kinds, read as unstructured: trainguard does not depend on
// Kueue's Go module.
var (
	WorkloadGVK              = schema.GroupVersionKind{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "Workload"}
	WorkloadPriorityClassGVK = schema.GroupVersionKind{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "WorkloadPriorityClass"}
)

const (
	// resync: how often an admitted Workload is looked at again.
	resync = 10 * time.Second
	// startupGrace: a pod running for less than this whose trainer does
	// not answer yet is starting, not deaf (importing torch takes time).
	startupGrace = 30 * time.Second
)

// Reconciler writes the priority boost of one Workload.
type Reconciler struct {
	Client ctrl.Client // the manager's cache for reads, the API server for the patch
	Scope  *policy.Scope
	// Kinds are the job kinds served: a Workload is looked at when one of
	// them owns it, and their KeyOf finds the job's pods.
	Kinds   jobs.Kinds
	Params  Params
	Fetch   trainerstatus.Fetcher
	Clock   clock.PassiveClock
	Metrics *Metrics

	mu    sync.Mutex
	state map[types.UID]State
}

// Reconcile looks at one Workload.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	wl := &unstructured.Unstructured{}
	wl.SetGroupVersionKind(WorkloadGVK)
	if err := r.Client.Get(ctx, req.NamespacedName, wl); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forget(req.Namespace, req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	job, ok := r.trainingJob(wl)
	if !ok {
		return reconcile.Result{}, nil
	}
	if _, skip, err := r.Scope.Namespace(ctx, wl.GetNamespace()); err != nil || skip != "" {
		r.Metrics.forget(req.Namespace, req.Name)
		return reconcile.Result{}, err
	}
	admitted := isAdmitted(wl)
	if !admitted {
		// Before any pod is read: a Workload Kueue evicted must lose its
		// boost whatever its trainers do.
		r.Metrics.forget(req.Namespace, req.Name)
		return reconcile.Result{}, r.apply(ctx, wl, false, Risk{}, 0)
	}
	risk, decided, err := r.risk(ctx, wl.GetNamespace(), job)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !decided {
		return reconcile.Result{RequeueAfter: resync}, nil
	}
	prio, _, _ := unstructured.NestedInt64(wl.Object, "spec", "priority")
	prio32 := int32(min(max(prio, math.MinInt32), math.MaxInt32))
	next, err := r.nextClass(ctx, prio32)
	if err != nil {
		return reconcile.Result{}, err
	}
	bound := Bound(r.Params.MaxBoost, prio32, next)
	r.Metrics.observe(req.Namespace, req.Name, job.Kind+"/"+job.Name, risk)
	return reconcile.Result{RequeueAfter: resync}, r.apply(ctx, wl, true, risk, bound)
}

// apply decides and, when the policy says so, writes the annotation with a
// merge patch that touches nothing else (the fence allows nothing else).
func (r *Reconciler) apply(ctx context.Context, wl *unstructured.Unstructured, admitted bool, risk Risk, bound int32) error {
	now := r.Clock.Now()
	cur := r.current(wl)
	b, write := Decide(r.Params, admitted, risk, bound, cur, now)
	if admitted {
		r.Metrics.boost(wl.GetNamespace(), wl.GetName(), b)
	}
	if !write {
		return nil
	}
	var value any // null: remove the annotation (0 is Kueue's default)
	if b != 0 {
		value = strconv.Itoa(int(b))
	}
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{Annotation: value}}}
	raw, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("encoding the boost patch: %w", err)
	}
	if err := r.Client.Patch(ctx, wl, ctrl.RawPatch(types.MergePatchType, raw)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("setting %s on Workload %s/%s: %w", Annotation, wl.GetNamespace(), wl.GetName(), err)
	}
	log.FromContext(ctx).Info("priority boost", "workload", wl.GetNamespace()+"/"+wl.GetName(), "from", cur.Boost, "to", b,
		"admitted", admitted, "secondsAtRisk", risk.SecondsAtRisk(), "bound", bound)
	r.mu.Lock()
	if r.state == nil {
		r.state = map[types.UID]State{}
	}
	r.state[wl.GetUID()] = State{Boost: b, Changed: now}
	r.mu.Unlock()
	return nil
}

// current is the annotation's value and when trainguard last changed it.
// A value trainguard cannot read (someone else's) counts as above every
// bound, so it is replaced at once.
func (r *Reconciler) current(wl *unstructured.Unstructured) State {
	r.mu.Lock()
	st := r.state[wl.GetUID()]
	r.mu.Unlock()
	raw, ok := wl.GetAnnotations()[Annotation]
	if !ok {
		st.Boost = 0
		return st
	}
	v, err := strconv.ParseInt(raw, 10, 32)
	if err != nil {
		v = math.MaxInt32
	}
	st.Boost = int32(v)
	return st
}

// trainingJob is the Workload's controller owner when it is a job kind
// trainguard injects, one a pod's owner chain ends at (a PyTorchJob, a
// batch Job, a TrainJob: jobs.Kinds.OwningKinds).
func (r *Reconciler) trainingJob(wl *unstructured.Unstructured) (metav1.OwnerReference, bool) {
	ref := metav1.GetControllerOfNoCopy(wl)
	if ref == nil {
		return metav1.OwnerReference{}, false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return metav1.OwnerReference{}, false
	}
	for _, k := range r.Kinds.OwningKinds() {
		if k.Group == gv.Group && k.Kind == ref.Kind {
			return *ref, true
		}
	}
	return metav1.OwnerReference{}, false
}

// isAdmitted: Kueue reserved quota and admitted it, and neither evicted nor
// finished it, and nobody deactivated it (spec.active false: Kueue evicts
// it next, and its conditions still say Admitted until then). A Workload
// that is not admitted loses its boost without a pod being read: its
// removal must not wait behind, nor depend on, the tenant's trainers.
func isAdmitted(wl *unstructured.Unstructured) bool {
	if active, found, _ := unstructured.NestedBool(wl.Object, "spec", "active"); found && !active {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	status := map[string]string{}
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		s, _ := m["status"].(string)
		status[t] = s
	}
	return status["Admitted"] == "True" && status["Evicted"] != "True" && status["Finished"] != "True"
}

// risk gathers the job's work at risk from its running pods: the trainer's
// status (any pod's: each reports the job's last commit; global rank 0's
// also its save time; read at once from all, under one deadline,
// readStatus), the last measured preStop→ack of its pods, and the
// shortest grace period. decided is false while the pods are starting.
func (r *Reconciler) risk(ctx context.Context, ns string, job metav1.OwnerReference) (Risk, bool, error) {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, ctrl.InNamespace(ns), ctrl.MatchingLabels{contract.LabelManaged: "true"}); err != nil {
		return Risk{}, false, err
	}
	now := r.Clock.Now()
	var risk Risk
	var running []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if !r.Kinds.KeyOf(p).Is(job) {
			continue
		}
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil && (risk.GraceSeconds == 0 || float64(*g) < risk.GraceSeconds) {
			risk.GraceSeconds = float64(*g)
		}
		risk.AckSeconds = max(risk.AckSeconds, measuredAck(p))
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Spec.HostNetwork {
			continue
		}
		running = append(running, p)
	}
	ips := make([]string, len(running))
	for i, p := range running {
		ips[i] = p.Status.PodIP
	}
	best, errs := readStatus(ctx, r.Fetch, ips)
	starting := false
	for i, err := range errs {
		if err == nil || errors.Is(err, errAnswered) {
			continue
		}
		p := running[i]
		if p.Status.StartTime != nil && now.Sub(p.Status.StartTime.Time) < startupGrace {
			starting = true
		}
		log.FromContext(ctx).V(1).Info("no trainer status", "pod", ns+"/"+p.Name, "err", err.Error())
	}
	if len(running) == 0 || (best == nil && starting) {
		return Risk{}, false, nil
	}
	if best != nil {
		risk.Known = true
		risk.SecondsSinceCommit, risk.StepsSinceCommit, risk.HasCommit = best.Since()
		if best.SaveSeconds != nil {
			risk.AckSeconds = max(risk.AckSeconds, *best.SaveSeconds)
		}
	}
	return risk, true, nil
}

// measuredAck is the preStop→ack time of the pod's last saved termination
// checkpoint (the agent's outcome line), 0 when there is none.
func measuredAck(p *corev1.Pod) float64 {
	var out float64
	for _, cs := range p.Status.ContainerStatuses {
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t == nil {
				continue
			}
			if o, err := contract.ParseCheckpointOutcome(t.Message); err == nil && o.Outcome == contract.OutcomeSaved {
				out = max(out, o.Seconds)
			}
		}
	}
	return out
}

// nextClass is the lowest priority class value above prio, among Kueue's
// WorkloadPriorityClasses and Kubernetes' PriorityClasses (a Workload's
// priority comes from either).
func (r *Reconciler) nextClass(ctx context.Context, prio int32) (*int32, error) {
	var next *int32
	consider := func(v int64) {
		if v > int64(prio) && v <= math.MaxInt32 && (next == nil || v < int64(*next)) {
			n := int32(v)
			next = &n
		}
	}
	wpcs := &unstructured.UnstructuredList{}
	wpcs.SetGroupVersionKind(WorkloadPriorityClassGVK.GroupVersion().WithKind("WorkloadPriorityClassList"))
	if err := r.Client.List(ctx, wpcs); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing WorkloadPriorityClasses: %w", err)
	}
	for _, w := range wpcs.Items {
		if v, ok, _ := unstructured.NestedInt64(w.Object, "value"); ok {
			consider(v)
		}
	}
	pcs := &schedulingv1.PriorityClassList{}
	if err := r.Client.List(ctx, pcs); err != nil {
		return nil, fmt.Errorf("listing PriorityClasses: %w", err)
	}
	for _, pc := range pcs.Items {
		consider(int64(pc.Value))
	}
	return next, nil
}
