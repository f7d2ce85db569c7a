package rescheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/mutators"
)

// IndexPodNodeName indexes cached pods by spec.nodeName, so a Node event
// finds its pods without listing every pod.
const IndexPodNodeName = "spec.nodeName"

// CacheByObject returns the label-restricted cache settings the manager must
// be created with: only managed pods and bad-node ConfigMaps are cached, so
// the cache stays small in clusters with many unrelated pods.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:       {Label: labels.SelectorFromSet(labels.Set{policy.LabelManaged: "true"})},
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{LabelBadNodes: "true"})},
	}
}

// Setup registers the controller when opts.Enabled. It runs only on the
// leader (the manager's default for controllers), while every replica's
// cache serves the pod webhook's NewBadNodeStore.
func Setup(mgr ctrl.Manager, cfg *policy.Config, opts Options) error {
	if !opts.Enabled {
		return nil
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("rescheduler options: %w", err)
	}
	m := newMetrics()
	if err := m.register(crmetrics.Registry); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, IndexPodNodeName, podNodeName); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	r := &Reconciler{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorder(ControllerName),
		clock:     clock.RealClock{},
		cfg:       cfg,
		opts:      opts,
		metrics:   m,
	}
	return r.setupWithManager(mgr)
}

func podNodeName(o client.Object) []string {
	if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
		return []string{n}
	}
	return nil
}

// Reconciler applies Decide to one managed pod.
type Reconciler struct {
	// client reads from the cache and writes to the API server.
	client client.Client
	// apiReader reads the job's annotations, which are not cached; it is
	// used only when a pod needs action, which is rare.
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.PassiveClock
	cfg       *policy.Config
	opts      Options
	metrics   *metrics
}

func (r *Reconciler) setupWithManager(mgr ctrl.Manager) error {
	managed := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[policy.LabelManaged] == "true"
	})
	badNodes := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[LabelBadNodes] == "true"
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("rescheduler").
		For(&corev1.Pod{}, builder.WithPredicates(managed)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.podsOnNode), builder.WithPredicates(nodeChanged())).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(pendingPodOf), builder.WithPredicates(badNodes)).
		Complete(r)
}

// nodeChanged passes node events that can change a decision: a node appears
// or goes, its readiness flips, or it is cordoned. Heartbeats do not pass.
// Expiry of the grace is not an event: pods requeue themselves for it.
func nodeChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, ok1 := e.ObjectOld.(*corev1.Node)
			newNode, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			return readyStatus(oldNode) != readyStatus(newNode) || oldNode.Spec.Unschedulable != newNode.Spec.Unschedulable
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func (r *Reconciler) podsOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{IndexPodNodeName: o.GetName()}, client.MatchingLabels{policy.LabelManaged: "true"}); err != nil {
		log.FromContext(ctx).Error(err, "listing pods on node", "node", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pods.Items))
	for i := range pods.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])})
	}
	return reqs
}

// pendingPodOf maps a record holding a bare pod to recreate to that pod, so
// a recreation interrupted by a restart or a leader change is resumed.
func pendingPodOf(_ context.Context, o client.Object) []reconcile.Request {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok || cm.Data[dataPendingPod] == "" {
		return nil
	}
	var pod metav1.PartialObjectMetadata
	if err := json.Unmarshal([]byte(cm.Data[dataPendingPod]), &pod); err != nil || pod.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: cm.Namespace, Name: pod.Name}}}
}

// Reconcile decides about one pod and carries the decision out.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return r.recreatePending(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, fmt.Errorf("getting pod %s: %w", req, err)
	}
	if pod.Labels[policy.LabelManaged] != "true" || pod.Spec.NodeName == "" {
		return reconcile.Result{}, nil
	}
	node, err := r.node(ctx, pod.Spec.NodeName)
	if err != nil {
		return reconcile.Result{}, err
	}
	key := JobKeyOf(pod)
	cm, rec, err := r.loadRecord(ctx, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	if key.Bare() && rec.PendingPod != nil && pod.UID != rec.Replaces {
		// The replacement exists: the last recreation stopped before it
		// cleared the record.
		return reconcile.Result{}, r.adopt(ctx, key, cm, &rec, pod)
	}
	d := Decide(r.input(pod, node, &rec, nil), r.opts)
	if actionable(d) {
		// The job may set trainguard.io/max-reschedules or the defaults;
		// read it now that it matters, and decide again with it.
		d = Decide(r.input(pod, node, &rec, r.jobAnnotations(ctx, key)), r.opts)
	}
	return r.carryOut(ctx, pod, key, cm, &rec, d)
}

// actionable says the decision depends on the job's policy (cap, defaults).
func actionable(d Decision) bool {
	switch d.Cause {
	case ReasonNodeLost, ReasonNodeDrained, ReasonRetryableExit:
		return true
	}
	return false
}

func (r *Reconciler) input(pod *corev1.Pod, node *corev1.Node, rec *Record, jobAnnotations map[string]string) Input {
	ann := copyMap(jobAnnotations)
	if ann == nil {
		ann = map[string]string{}
	}
	for k, v := range pod.Annotations {
		ann[k] = v
	}
	pol, _ := policy.Resolve(r.cfg, nil, ann) // bad values fall back to the config; the webhook warned about them
	now := r.clock.Now()
	return Input{
		Pod:                    pod,
		Node:                   node,
		Now:                    now,
		DefaultFaultScheduling: pol.FaultScheduling,
		DefaultRecoverStrategy: pol.RecoverStrategy,
		TrainingContainers:     pol.TrainingContainers,
		MaxReschedules:         pol.MaxReschedules,
		History: History{
			Reschedules:  rec.Reschedules,
			RoundStart:   rec.RoundStart,
			NodeRecorded: rec.Recorded(pod.Spec.NodeName, now),
		},
	}
}

// carryOut executes d: Events, metrics and the log line for every decision,
// and the record, the delete or the annotations it calls for.
func (r *Reconciler) carryOut(ctx context.Context, pod *corev1.Pod, key JobKey, cm *corev1.ConfigMap, rec *Record, d Decision) (reconcile.Result, error) {
	switch {
	case d.Reason == "" && d.Action == ActionWait:
		log.FromContext(ctx).V(1).Info("waiting", "pod", klogRef(pod), "node", pod.Spec.NodeName, "why", d.Message, "after", d.RequeueAfter)
		return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
	case d.Reason == "":
		return reconcile.Result{}, nil
	case d.Action == ActionWait: // backoff
		r.report(ctx, pod, key, d)
		return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
	case d.Action == ActionNone:
		return reconcile.Result{}, r.reportOnce(ctx, pod, key, rec, d)
	}
	if d.Migrate {
		if err := r.recordBadNode(ctx, pod, key, cm, rec, d); err != nil {
			r.metrics.errorsByOp.WithLabelValues("record").Inc()
			return reconcile.Result{}, err
		}
	}
	if err := r.deletePod(ctx, pod, d.Action == ActionForceDelete); err != nil {
		r.metrics.errorsByOp.WithLabelValues("delete").Inc()
		return reconcile.Result{}, err
	}
	r.report(ctx, pod, key, d)
	return reconcile.Result{}, nil
}

// reportOnce reports a no-action decision the first time it is made for the
// pod; the pod's decision annotation remembers it across reconciles,
// restarts and leader changes.
func (r *Reconciler) reportOnce(ctx context.Context, pod *corev1.Pod, key JobKey, rec *Record, d Decision) error {
	if pod.Annotations[AnnotationDecision] == d.Reason {
		return nil
	}
	if d.Reason == ReasonRescheduleCapReached {
		if err := r.markExhausted(ctx, key, rec.Reschedules); err != nil {
			r.metrics.errorsByOp.WithLabelValues("annotate-job").Inc()
			return err
		}
	}
	if err := r.annotate(ctx, pod, AnnotationDecision, d.Reason); err != nil {
		r.metrics.errorsByOp.WithLabelValues("annotate-pod").Inc()
		return err
	}
	r.report(ctx, pod, key, d)
	return nil
}

// report emits the cause Event, the decision Event, the counters and the log line.
func (r *Reconciler) report(ctx context.Context, pod *corev1.Pod, key JobKey, d Decision) {
	if d.Cause != "" && d.Cause != d.Reason {
		r.event(pod, corev1.EventTypeWarning, d.Cause, d.Action, d.Message)
	}
	r.event(pod, eventType(d.Reason), d.Reason, d.Action, d.Message)
	exitCode := "none"
	if d.ExitCode != nil {
		exitCode = fmt.Sprint(*d.ExitCode)
	}
	log.FromContext(ctx).Info("rescheduler decision", "pod", klogRef(pod), "node", pod.Spec.NodeName, "exitCode", exitCode,
		"cause", d.Cause, "decision", d.Reason, "action", d.Action, "job", key.String(), "message", d.Message)
}

func (r *Reconciler) event(obj *corev1.Pod, eventType, reason string, action Action, msg string) {
	r.recorder.Eventf(obj, nil, eventType, reason, string(action), "%s", msg)
	r.metrics.decisions.WithLabelValues(reason).Inc()
}

func eventType(reason string) string {
	switch reason {
	case ReasonPermanentFailure, ReasonRescheduleCapReached, ReasonRecreateFailed, ReasonNodeLost, ReasonNodeDrained, ReasonRetryableExit:
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

func klogRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

func (r *Reconciler) node(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	return node, nil
}

// loadRecord reads the job's record from the cache; cm is nil when there is none.
func (r *Reconciler) loadRecord(ctx context.Context, key JobKey) (*corev1.ConfigMap, Record, error) {
	cm := &corev1.ConfigMap{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.RecordName()}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, Record{}, nil
		}
		return nil, Record{}, fmt.Errorf("getting bad-node record of %s: %w", key, err)
	}
	rec, err := decodeRecord(cm)
	if err != nil {
		return nil, Record{}, err
	}
	return cm, rec, nil
}

// recordBadNode adds the pod's node to the job's record, counts a new
// round, and for a bare pod stashes its replacement. It writes with the
// resourceVersion read, so a stale cache makes it fail and retry instead of
// losing a count.
func (r *Reconciler) recordBadNode(ctx context.Context, pod *corev1.Pod, key JobKey, cm *corev1.ConfigMap, rec *Record, d Decision) error {
	now := r.clock.Now()
	rec.AddNode(pod.Spec.NodeName, now, r.opts.BadNodeTTL, r.opts.MaxBadNodes)
	if d.NewRound {
		rec.Reschedules++
		rec.RoundStart = now
	}
	create := cm == nil
	if create {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.RecordName()}}
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[LabelBadNodes] = "true"
	if key.Bare() {
		rec.PendingPod = replacementFor(pod, rec.Active(now, r.opts.MaxBadNodes))
		rec.Replaces = pod.UID
		// Owned by nothing while the pod is gone, or the garbage collector
		// would delete the record (and the stashed pod) with the old pod.
		cm.OwnerReferences = nil
	} else if ref := metav1.GetControllerOf(pod); ref != nil {
		// Deleted with the job.
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}}
	}
	if err := rec.encodeInto(cm, key); err != nil {
		return err
	}
	var err error
	if create {
		err = r.client.Create(ctx, cm)
	} else {
		err = r.client.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("recording node %s as bad for %s: %w", pod.Spec.NodeName, key, err)
	}
	r.metrics.badNodes.Inc()
	return nil
}

// deletePod deletes the pod it decided about, never a replacement that took its name.
func (r *Reconciler) deletePod(ctx context.Context, pod *corev1.Pod, force bool) error {
	opts := []client.DeleteOption{client.Preconditions{UID: &pod.UID}}
	mode := "graceful"
	if force {
		opts = append(opts, client.GracePeriodSeconds(0))
		mode = "force"
	}
	if err := r.client.Delete(ctx, pod, opts...); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // already gone, or already replaced
		}
		return fmt.Errorf("deleting pod %s (%s): %w", klogRef(pod), mode, err)
	}
	r.metrics.deletions.WithLabelValues(mode).Inc()
	return nil
}

// recreatePending creates the replacement of a deleted bare pod once the old
// one is gone.
func (r *Reconciler) recreatePending(ctx context.Context, name types.NamespacedName) (reconcile.Result, error) {
	key := JobKey{Namespace: name.Namespace, APIVersion: "v1", Kind: "Pod", Name: name.Name}
	cm, rec, err := r.loadRecord(ctx, key)
	if err != nil || cm == nil || rec.PendingPod == nil || rec.PendingPod.Name != name.Name {
		return reconcile.Result{}, err
	}
	now := r.clock.Now()
	pod := rec.PendingPod.DeepCopy()
	mutators.RequireNotOnNodes(&pod.Spec, rec.Active(now, r.opts.MaxBadNodes))
	err = r.client.Create(ctx, pod)
	switch {
	case apierrors.IsAlreadyExists(err):
		existing := &corev1.Pod{}
		if getErr := r.apiReader.Get(ctx, name, existing); getErr != nil {
			return reconcile.Result{}, fmt.Errorf("getting pod %s: %w", name, getErr)
		}
		if existing.UID == rec.Replaces {
			// The old pod is still terminating; its removal requeues us.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		pod = existing // recreated already, by us before a crash or by someone else
	case err != nil:
		r.metrics.errorsByOp.WithLabelValues("recreate").Inc()
		r.event(rec.PendingPod, corev1.EventTypeWarning, ReasonRecreateFailed, "Recreate", err.Error())
		return reconcile.Result{}, fmt.Errorf("recreating bare pod %s: %w", name, err)
	default:
		r.metrics.recreated.Inc()
		r.event(pod, corev1.EventTypeNormal, ReasonBarePodRecreated, "Recreate",
			fmt.Sprintf("bare pod recreated without its node; avoids %v", rec.Active(now, r.opts.MaxBadNodes)))
		log.FromContext(ctx).Info("rescheduler decision", "pod", name.String(), "decision", ReasonBarePodRecreated, "job", key.String())
	}
	return reconcile.Result{}, r.adopt(ctx, key, cm, &rec, pod)
}

// adopt clears the pending pod from the record and hands the record to the
// replacement, so the garbage collector deletes it with the pod.
func (r *Reconciler) adopt(ctx context.Context, key JobKey, cm *corev1.ConfigMap, rec *Record, pod *corev1.Pod) error {
	rec.PendingPod, rec.Replaces = nil, ""
	cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
	if err := rec.encodeInto(cm, key); err != nil {
		return err
	}
	if err := r.client.Update(ctx, cm); err != nil {
		return fmt.Errorf("clearing pending pod of %s: %w", key, err)
	}
	return nil
}

// jobAnnotations reads the owner's annotations, uncached and untyped: the
// job's CRD may not be installed, and a bare pod is its own job.
func (r *Reconciler) jobAnnotations(ctx context.Context, key JobKey) map[string]string {
	if key.Bare() {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(key.APIVersion)
	u.SetKind(key.Kind)
	if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, u); err != nil {
		log.FromContext(ctx).V(1).Info("job annotations unavailable; using the pod's and the config's", "job", key.String(), "error", err.Error())
		return nil
	}
	return u.GetAnnotations()
}

// markExhausted annotates the job (or the bare pod) whose cap is reached.
// A job whose CRD is missing or that is gone is not an error: the pod's
// Event still says it.
func (r *Reconciler) markExhausted(ctx context.Context, key JobKey, reschedules int) error {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(key.APIVersion)
	u.SetKind(key.Kind)
	u.SetNamespace(key.Namespace)
	u.SetName(key.Name)
	patch, err := annotationPatch(AnnotationReschedulesExhausted, fmt.Sprint(reschedules))
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			log.FromContext(ctx).Info("cannot annotate job", "job", key.String(), "error", err.Error())
			return nil
		}
		return fmt.Errorf("annotating %s: %w", key, err)
	}
	return nil
}

func (r *Reconciler) annotate(ctx context.Context, pod *corev1.Pod, k, v string) error {
	patch, err := annotationPatch(k, v)
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotating pod %s: %w", klogRef(pod), err)
	}
	return nil
}

func annotationPatch(k, v string) ([]byte, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{k: v}}})
	if err != nil {
		return nil, fmt.Errorf("encoding annotation patch: %w", err)
	}
	return patch, nil
}
