package rescheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/jobs"
)

// carryOut executes d: Events, metrics and the log line for every decision,
// and the record, the eviction or the annotations it calls for. An eviction
// or delete comes here only past the storm brakes (Reconcile).
func (r *Reconciler) carryOut(ctx context.Context, pod *corev1.Pod, key jobs.Key, cm *corev1.ConfigMap, rec *Record, d Decision) (reconcile.Result, error) {
	if !acts(d) {
		// Nothing to hold any more (the node came back, the brake let
		// go): a later hold is a new one, and news.
		r.held.forget(pod.UID)
	}
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
		return reconcile.Result{}, r.reportOnce(ctx, pod, key, cm, rec, d)
	}
	r.held.forget(pod.UID) // a later hold is news again
	if stale, err := r.staleCache(ctx, pod); stale || err != nil {
		return reconcile.Result{RequeueAfter: staleRetry}, err
	}
	if d.StopInPlace {
		// Before the eviction, as a bad node is: the replacement must not
		// get the restart rules again.
		if err := r.recordInPlace(ctx, pod, key, cm, rec, d); err != nil {
			r.metrics.errorsByOp.WithLabelValues("record").Inc()
			return reconcile.Result{}, err
		}
	}
	if d.Migrate {
		err := r.recordBadNode(ctx, pod, key, cm, rec, d)
		var nr notRecreatable
		if errors.As(err, &nr) {
			return reconcile.Result{}, r.reportOnce(ctx, pod, key, cm, rec, d.no(ReasonNotRecreatable, string(nr)))
		}
		if err != nil {
			r.metrics.errorsByOp.WithLabelValues("record").Inc()
			return reconcile.Result{}, err
		}
	}
	err := r.remove(ctx, pod, d.Action)
	if apierrors.IsTooManyRequests(err) {
		return r.evictionBlocked(ctx, pod, key, d, err), nil
	}
	if err != nil {
		r.metrics.errorsByOp.WithLabelValues("evict").Inc()
		return reconcile.Result{}, err
	}
	r.forgetBlocked(client.ObjectKeyFromObject(pod))
	r.report(ctx, pod, key, d)
	return reconcile.Result{}, nil
}

// staleRetry is how soon a pod whose cached copy was stale is looked at
// again; the informer usually delivers the newer copy before that.
const staleRetry = time.Second

// staleCache reads the pod from the API server before an action and says
// whether the cached copy the decision was made on is out of date (a newer
// resourceVersion, or gone). A pod updated twice while the first reconcile
// evicted it is reconciled again at once, from a cache that may not yet
// show the eviction: without this check that second pass decided, evicted
// and reported again, and counted a second reschedule round (found by the
// leader-election test under CI load).
func (r *Reconciler) staleCache(ctx context.Context, pod *corev1.Pod) (bool, error) {
	live := &corev1.Pod{}
	err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(pod), live)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading pod %s before acting: %w", klogRef(pod), err)
	case live.UID != pod.UID || live.ResourceVersion != pod.ResourceVersion:
		log.FromContext(ctx).V(1).Info("cached pod is stale; deciding again on the newer copy", "pod", klogRef(pod),
			"cached", pod.ResourceVersion, "live", live.ResourceVersion)
		return true, nil
	}
	return false, nil
}

// holdBack reports an action the brakes hold: nothing is evicted or
// deleted; the pod looks again later. A pod held alone (a token, a Lease
// read, a budget) gets its own Event. A pod held by a zone's or the
// cluster's brake does not: the brake's Event, on the pod it held as it
// is written, counts the pods it holds (noteHeld). Either way each pod's
// hold is a log line, at V(1) once said (make scale reads the first as
// the pod's decision).
func (r *Reconciler) holdBack(ctx context.Context, pod *corev1.Pod, key jobs.Key, d Decision, h *hold) reconcile.Result {
	r.metrics.held.WithLabelValues(h.reason).Inc()
	msg := h.message + "; held: " + d.Message
	logger := log.FromContext(ctx)
	news := r.held.first(pod.UID, h.reason, r.clock.Now())
	if !news {
		logger = logger.V(1) // the same hold looked at again: said once already
	}
	switch {
	case h.brake != "":
		if held, say := r.brakes.noteHeld(h.brake, pod.UID); say {
			msg = fmt.Sprintf("%s; %s held by this brake so far, this one among them (one Event for all of them); held: %s",
				h.message, nPods(held), d.Message)
			r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, h.reason, string(d.Action), "%s", msg)
			log.FromContext(ctx).Info("rescheduler brake holds pods", "brake", brakeName(h.brake), "heldPods", held, "reason", h.reason)
		}
	case news:
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, h.reason, string(d.Action), "%s", msg)
	}
	logger.Info("rescheduler action held", "pod", klogRef(pod), "node", pod.Spec.NodeName, "held", h.reason,
		"decision", d.Reason, "action", d.Action, "job", key.String(), "message", msg, "retryAfter", h.after)
	return reconcile.Result{RequeueAfter: h.after}
}

// nPods is "1 pod" or "n pods".
func nPods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// brakeName names a brake in a log line.
func brakeName(zone string) string {
	if zone == clusterZone {
		return "cluster"
	}
	return fmt.Sprintf("zone %q", zone)
}

// heldNotes remembers which pods were told (Event, log line) that an action
// is held, and why, so that a hold looked at again every few seconds
// (brakeRecheck) is said once, not once a look: a brake engages when the
// control plane or a zone is in trouble, and one Event series update per
// held pod every 30 s (client-go's series) was an API write per pod the
// brake itself caused (docs/history/scale-rounds.md, third round: 1 write
// per held pod beyond its Event at 1,000 nodes, 5,936 Events in a 55 s
// stall). A hold is said again after heldRepeat, when its reason changes,
// and always for EvictionBlocked, whose every retry is news. Bounded: notes
// older than heldRepeat are dropped, at most once a minute.
type heldNotes struct {
	mu        sync.Mutex
	notes     map[types.UID]heldNote
	lastPrune time.Time
}

type heldNote struct {
	reason string
	at     time.Time
}

// heldRepeat: a hold still in force is said again this often (an Event
// older than the API server's event TTL, 1 h by default, would be gone).
const heldRepeat = 10 * time.Minute

// forget drops pod's note: its action went ahead.
func (n *heldNotes) forget(pod types.UID) {
	n.mu.Lock()
	delete(n.notes, pod)
	n.mu.Unlock()
}

// first reports whether the hold of pod for reason is news at now, and
// notes it.
func (n *heldNotes) first(pod types.UID, reason string, now time.Time) bool {
	if reason == ReasonEvictionBlocked {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.notes == nil {
		n.notes = map[types.UID]heldNote{}
	}
	if now.Sub(n.lastPrune) >= time.Minute {
		for uid, note := range n.notes {
			if now.Sub(note.at) >= heldRepeat {
				delete(n.notes, uid)
			}
		}
		n.lastPrune = now
	}
	if note, ok := n.notes[pod]; ok && note.reason == reason && now.Sub(note.at) < heldRepeat {
		return false
	}
	n.notes[pod] = heldNote{reason: reason, at: now}
	return true
}

// evictionBlocked: a PodDisruptionBudget refused the eviction (429). It is
// never bypassed: the pod is retried with exponential backoff.
func (r *Reconciler) evictionBlocked(ctx context.Context, pod *corev1.Pod, key jobs.Key, d Decision, err error) reconcile.Result {
	name := client.ObjectKeyFromObject(pod)
	r.mu.Lock()
	b := r.blocked[name]
	if b.uid != pod.UID {
		b = blockedPod{uid: pod.UID}
	}
	b.refusals++
	r.blocked[name] = b
	r.mu.Unlock()
	after := backoff(r.opts, b.refusals)
	return r.holdBack(ctx, pod, key, d, &hold{reason: ReasonEvictionBlocked, after: after,
		message: fmt.Sprintf("eviction refused (%v); PodDisruptionBudgets are never bypassed, retry %d in %s", err, b.refusals, after)})
}

// blockedPod counts the refused evictions of one pod, for the backoff.
type blockedPod struct {
	uid      types.UID
	refusals int
}

func (r *Reconciler) forgetBlocked(name types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.blocked, name)
}

// remove evicts the pod it decided about (never a replacement that took
// its name: the UID is a precondition), or force-deletes it when Decide
// found the node gone or unreachable past --force-delete-after.
func (r *Reconciler) remove(ctx context.Context, pod *corev1.Pod, action Action) error {
	opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}
	var err error
	mode := "evict"
	switch action {
	case ActionForceDelete:
		mode = "force"
		if err = r.markFailed(ctx, pod); err == nil {
			err = r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}, client.GracePeriodSeconds(0))
		}
	case ActionEvictNow:
		mode = "evict-now"
		opts.GracePeriodSeconds = ptr.To[int64](0)
		fallthrough
	default:
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}, DeleteOptions: opts}
		err = r.client.SubResource("eviction").Create(ctx, pod, ev)
	}
	switch {
	case err == nil:
		r.metrics.deletions.WithLabelValues(mode).Inc()
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil // already gone, or already replaced
	case apierrors.IsTooManyRequests(err):
		return err
	}
	return fmt.Errorf("%s of pod %s: %w", mode, klogRef(pod), err)
}

// ReasonNodeLostDisruption is the DisruptionTarget condition's reason on a
// pod the rescheduler marks Failed before force-deleting it.
const ReasonNodeLostDisruption = "DeletionByTrainguardNodeLost"

// markFailed sets a pod whose node is gone or unreachable to phase Failed
// with a DisruptionTarget condition before the force delete, as the pod
// garbage collector does for pods on out-of-service nodes. Without it a
// batch Job with a podFailurePolicy (what a resilient TrainingRuntime uses,
// docs/trainjob.md) keeps its job-tracking finalizer on the pod until the
// dead kubelet reports a terminal phase, which it never does: the deleted
// pod stays Terminating and the Job never creates the index again. The
// DisruptionTarget condition lets that policy ignore the failure, so the
// lost node uses up neither backoffLimit nor the JobSet's maxRestarts.
func (r *Reconciler) markFailed(ctx context.Context, pod *corev1.Pod) error {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return nil
	}
	cur := pod.DeepCopy()
	cur.Status.Phase = corev1.PodFailed
	cond := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: ReasonNodeLostDisruption,
		Message: "trainguard: the pod's node is lost; marked Failed before a force delete", LastTransitionTime: metav1.Now()}
	replaced := false
	for i := range cur.Status.Conditions {
		if cur.Status.Conditions[i].Type == corev1.DisruptionTarget {
			cur.Status.Conditions[i], replaced = cond, true
		}
	}
	if !replaced {
		cur.Status.Conditions = append(cur.Status.Conditions, cond)
	}
	// A strategic merge patch sends only this condition (merged by type): the
	// cached pod is stripped, and its other conditions must not be dropped.
	err := r.client.Status().Patch(ctx, cur, client.StrategicMergeFrom(pod, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("marking pod %s Failed before the force delete: %w", klogRef(pod), err)
	}
	return nil
}

// reportOnce reports a no-action decision the first time it is made for the
// pod; the pod's decision annotation remembers it across reconciles,
// restarts and leader changes.
func (r *Reconciler) reportOnce(ctx context.Context, pod *corev1.Pod, key jobs.Key, cm *corev1.ConfigMap, rec *Record, d Decision) error {
	if pod.Annotations[contract.AnnotationDecision] == d.once() {
		return nil
	}
	if err := r.recordInPlace(ctx, pod, key, cm, rec, d); err != nil {
		r.metrics.errorsByOp.WithLabelValues("record").Inc()
		return err
	}
	if d.Reason == ReasonRescheduleCapReached {
		// In-place restarts count per pod (its restart count); migrations per job (the record).
		if err := r.markExhausted(ctx, pod, key, max(rec.Reschedules, int(d.restarts))); err != nil {
			r.metrics.errorsByOp.WithLabelValues("annotate-job").Inc()
			return err
		}
	}
	if err := r.annotate(ctx, pod, contract.AnnotationDecision, d.once()); err != nil {
		r.metrics.errorsByOp.WithLabelValues("annotate-pod").Inc()
		return err
	}
	r.report(ctx, pod, key, d)
	return nil
}

// report emits the cause Event, the decision Event, the counters and the log line.
func (r *Reconciler) report(ctx context.Context, pod *corev1.Pod, key jobs.Key, d Decision) {
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
	case ReasonPermanentFailure, ReasonRescheduleCapReached, ReasonInPlaceRestartCapReached, ReasonNotRetried, ReasonRecreateFailed, ReasonNotRecreatable, ReasonNodeLost, ReasonNodeDrained, ReasonRetryableExit:
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

func klogRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// recordBadNode adds the pod's node to the job's record in trainguard's
// namespace, counts a new round, and for a bare pod stashes it. It writes
// with the resourceVersion read, so a stale cache makes it fail and retry
// instead of losing a count.
func (r *Reconciler) recordBadNode(ctx context.Context, pod *corev1.Pod, key jobs.Key, cm *corev1.ConfigMap, rec *Record, d Decision) error {
	if key.Bare() {
		stash, err := r.stash(ctx, pod)
		if err != nil {
			return err
		}
		// Before anything is recorded or evicted: a pod trainguard may not
		// recreate is not moved at all.
		if why := unrecreatable(stash); why != "" {
			return notRecreatable(why)
		}
		rec.Stash = stash
	}
	now := r.clock.Now()
	rec.AddNode(pod.Spec.NodeName, pod.CreationTimestamp.Time, now, r.opts.BadNodeTTL.Duration, r.opts.MaxBadNodes)
	if d.NewRound {
		rec.Reschedules++
		rec.RoundStart = now
	}
	if err := r.writeRecord(ctx, pod, key, cm, rec); err != nil {
		return fmt.Errorf("recording node %s as bad for %s: %w", pod.Spec.NodeName, key, err)
	}
	r.metrics.badNodes.Inc()
	return nil
}

// recordInPlace keeps the job's in-place restart count (the highest seen)
// and, at the cap, the stop in its record, and reports the stop once on
// the job: a Warning Event and the reschedules-exhausted annotation.
// Nothing is written when the record already says as much.
func (r *Reconciler) recordInPlace(ctx context.Context, pod *corev1.Pod, key jobs.Key, cm *corev1.ConfigMap, rec *Record, d Decision) error {
	stop := d.StopInPlace && !rec.InPlaceStopped
	if d.InPlaceRestarts <= rec.InPlaceRestarts && !stop {
		return nil
	}
	rec.InPlaceRestarts = max(rec.InPlaceRestarts, d.InPlaceRestarts)
	rec.InPlaceStopped = rec.InPlaceStopped || d.StopInPlace
	if err := r.writeRecord(ctx, pod, key, cm, rec); err != nil {
		return fmt.Errorf("recording the in-place restarts of %s: %w", key, err)
	}
	if !stop {
		return nil
	}
	if err := r.markExhausted(ctx, pod, key, rec.InPlaceRestarts); err != nil {
		return err
	}
	r.jobEvent(ctx, pod, corev1.EventTypeWarning, ReasonInPlaceRestartCapReached, d.Action,
		fmt.Sprintf("in-place restarts of the job reached its cap (%d/%d, seen at pod %s, exit code %d): trainguard restarts it in place no more; the job's restart policy decides from here",
			rec.InPlaceRestarts, d.inPlaceCap, pod.Name, deref(d.ExitCode)))
	return nil
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// jobEvent reports on the pod's job (a bare pod: on the pod itself).
func (r *Reconciler) jobEvent(ctx context.Context, pod *corev1.Pod, eventType, reason string, action Action, msg string) {
	job, err := r.jobOf(ctx, pod)
	if err != nil || job == nil {
		r.recorder.Eventf(pod, nil, eventType, reason, string(action), "%s", msg)
		return
	}
	r.recorder.Eventf(job, pod, eventType, reason, string(action), "%s", msg)
}

// writeRecord writes rec into the job's record (created when cm is nil),
// with the resourceVersion read: a stale cache fails and retries instead of
// losing a count.
func (r *Reconciler) writeRecord(ctx context.Context, pod *corev1.Pod, key jobs.Key, cm *corev1.ConfigMap, rec *Record) error {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		rec.JobUID = ref.UID
	}
	create := cm == nil
	if create {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: RecordName(key)}}
	}
	cm = cm.DeepCopy()
	// No owner reference: the job lives in another namespace, and the
	// garbage collector deletes dependents of cross-namespace owners. The
	// sweeper removes records of jobs that are gone.
	cm.OwnerReferences = nil
	cm.Labels = map[string]string{contract.LabelBadNodes: "true"}
	if err := rec.encodeInto(cm, key); err != nil {
		return err
	}
	var err error
	if create {
		err = r.client.Create(ctx, cm)
	} else {
		err = r.client.Update(ctx, cm)
	}
	return err
}

// stash reads the bare pod from the API server (the cache holds only a
// stripped copy) and keeps it, after checking it is still the pod decided
// about.
func (r *Reconciler) stash(ctx context.Context, pod *corev1.Pod) (*Stash, error) {
	full := &corev1.Pod{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(pod), full); err != nil {
		return nil, fmt.Errorf("reading bare pod %s to stash it: %w", klogRef(pod), err)
	}
	if full.UID != pod.UID {
		return nil, fmt.Errorf("bare pod %s was replaced (uid %s, decided about %s)", klogRef(pod), full.UID, pod.UID)
	}
	return stashOf(full), nil
}

// recreatePending creates the replacement of an evicted bare pod once the
// old one is gone, from the stash trainguard itself wrote, in the old pod's
// namespace, and only while that namespace is still opted in.
func (r *Reconciler) recreatePending(ctx context.Context, name types.NamespacedName) (reconcile.Result, error) {
	key := jobs.Key{Namespace: name.Namespace, APIVersion: "v1", Kind: "Pod", Name: name.Name}
	cm, rec, err := r.loadRecord(ctx, key)
	if err != nil || cm == nil || rec.Stash == nil {
		return reconcile.Result{}, err
	}
	if ok, err := r.optedIn(ctx, key.Namespace, rec.Stash.Annotations); !ok || err != nil {
		return reconcile.Result{}, err
	}
	now := r.clock.Now()
	avoid := rec.Avoid(now, r.opts.MaxBadNodes)
	pod := replacementFor(rec.Stash, avoid)
	err = r.client.Create(ctx, pod)
	switch {
	case apierrors.IsAlreadyExists(err):
		existing := &corev1.Pod{}
		if getErr := r.apiReader.Get(ctx, name, existing); getErr != nil {
			return reconcile.Result{}, fmt.Errorf("getting pod %s: %w", name, getErr)
		}
		if existing.UID == rec.Stash.UID {
			// The old pod is still terminating; its removal requeues us.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
	case err != nil:
		r.metrics.errorsByOp.WithLabelValues("recreate").Inc()
		r.event(pod, corev1.EventTypeWarning, ReasonRecreateFailed, "Recreate", err.Error())
		return reconcile.Result{}, fmt.Errorf("recreating bare pod %s: %w", name, err)
	default:
		r.metrics.recreated.Inc()
		r.event(pod, corev1.EventTypeNormal, ReasonBarePodRecreated, "Recreate",
			"bare pod recreated without its node; "+describeAvoid(avoid))
		log.FromContext(ctx).Info("rescheduler decision", "pod", name.String(), "decision", ReasonBarePodRecreated, "job", key.String())
	}
	return reconcile.Result{}, r.clearStash(ctx, key, cm, &rec)
}

// clearStash drops the stash once the replacement exists, so a later
// delete of the replacement never resurrects it.
func (r *Reconciler) clearStash(ctx context.Context, key jobs.Key, cm *corev1.ConfigMap, rec *Record) error {
	rec.Stash = nil
	cm = cm.DeepCopy()
	if err := rec.encodeInto(cm, key); err != nil {
		return err
	}
	if err := r.client.Update(ctx, cm); err != nil {
		return fmt.Errorf("clearing the stash of %s: %w", key, err)
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

// describeAvoid says how a replacement avoids the job's bad nodes.
func describeAvoid(a podspec.Avoid) string {
	var parts []string
	if len(a.Required) > 0 {
		parts = append(parts, fmt.Sprintf("avoids %v (failed the job again)", a.Required))
	}
	if len(a.Preferred) > 0 {
		parts = append(parts, fmt.Sprintf("prefers other nodes than %v (failed the job once)", a.Preferred))
	}
	if len(parts) == 0 {
		return "avoids no node"
	}
	return strings.Join(parts, "; ")
}
