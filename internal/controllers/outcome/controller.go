package outcome

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/controllers/ownerchain"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// ControllerName names the controller, its logger and its Events' source.
const ControllerName = "trainguard-checkpoint-outcome"

// Event reasons, one per outcome.
const (
	ReasonSaved     = "CheckpointSaved"
	ReasonTimeout   = "CheckpointTimeout"
	ReasonNoTrainer = "CheckpointNoTrainer"
	ReasonFailed    = "CheckpointFailed"
	// EventAction is the Event's action (events.k8s.io/v1).
	EventAction = "PreStopCheckpoint"
)

const (
	// backlog: terminations that finished this long before the controller
	// started are not reported. A new leader still reports what happened
	// during the failover, but not every old terminated pod again.
	backlog = 5 * time.Minute
	// forgetAfter: how long a deleted pod's dedupe entries are kept, so
	// events still queued for it cannot report twice.
	forgetAfter = 10 * time.Minute
)

// item is one container termination to report, or (Forget) the
// instruction to drop a deleted pod's dedupe entries. It carries what it
// needs from the pod, because the kubelet's last status update and the
// pod's deletion arrive close together: by the time it is reconciled, the
// pod may be gone from the cache.
type item struct {
	Namespace, Pod string
	UID            types.UID
	Container      string
	// Restart is the container's restart count when it terminated.
	Restart  int32
	Message  string
	Finished time.Time
	Owner    metav1.OwnerReference
	// Disruption is the reason of the pod's true DisruptionTarget
	// condition, Deleting whether it is being deleted, Queue its Kueue
	// queue label: what tells why it stopped (cause.go), taken from the pod
	// as it was, since it may be gone when the item is reconciled.
	Disruption string
	Deleting   bool
	Queue      string
	Forget     bool
	// Init asks for the namespace's metric series at zero (the first
	// managed pod seen there), so the first checkpoint is an increase.
	Init bool
}

// Setup registers the reader when enabled. It shares the rescheduler's
// label-restricted pod cache (managed pods only) and its RBAC (pods
// get/list/watch, PyTorchJobs get), so the chart enables both together;
// TrainJobs, JobSets and Jobs get come with the chart's Trainer support.
// kinds are the job kinds the process serves: their owner chains lead a
// pod to the job that gets the Event.
func Setup(mgr ctrl.Manager, cfg *configv1alpha1.Configuration, kinds jobs.Kinds, enabled bool) error {
	if !enabled {
		return nil
	}
	m := newMetrics()
	if err := m.register(crmetrics.Registry); err != nil {
		return err
	}
	r := &Reconciler{
		client: mgr.GetClient(), apiReader: mgr.GetAPIReader(),
		recorder: mgr.GetEventRecorder(ControllerName), cfg: cfg, metrics: m, chains: ownerchain.New(kinds),
		seen: map[types.UID]map[string]bool{}, inited: map[string]bool{},
	}
	return builder.TypedControllerManagedBy[item](mgr).
		Named("checkpoint-outcome").
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &corev1.Pod{}, r.handler())).
		Complete(r)
}

// Reconciler reports checkpoint outcomes.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
	cfg       *configv1alpha1.Configuration
	metrics   *metrics
	// chains lead a pod to its job (ownerchain.Chains.Job).
	chains ownerchain.Chains

	once    sync.Once
	started time.Time
	mu      sync.Mutex
	// seen holds, per pod UID, the terminations already reported
	// ("container/restart"). Memory only: trainguard never writes to a
	// tenant's pod to remember what it reported.
	seen map[types.UID]map[string]bool
	// inited holds the namespaces whose series exist (at zero or more).
	inited map[string]bool
}

// handler turns pod events into items. Only terminations whose message
// mentions contract.CheckpointOutcomePrefix pass, so unrelated status updates cost a string scan.
func (r *Reconciler) handler() handler.TypedEventHandler[*corev1.Pod, item] {
	enqueue := func(pod *corev1.Pod, q workqueue.TypedRateLimitingInterface[item]) {
		r.once.Do(func() { r.started = time.Now() })
		for _, it := range itemsOf(pod) {
			q.Add(it)
		}
	}
	return handler.TypedFuncs[*corev1.Pod, item]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[item]) {
			if e.Object.Labels[contract.LabelManaged] == "true" {
				q.Add(item{Namespace: e.Object.Namespace, Init: true})
			}
			enqueue(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[item]) {
			enqueue(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[item]) {
			if e.Object == nil {
				return
			}
			enqueue(e.Object, q)
			q.AddAfter(item{UID: e.Object.UID, Forget: true}, forgetAfter)
		},
	}
}

// itemsOf lists a managed pod's terminated containers whose message carries
// an outcome: the current state (the container stopped for good) and the
// last state (it stopped and was restarted).
func itemsOf(pod *corev1.Pod) []item {
	if pod.Labels[contract.LabelManaged] != "true" {
		return nil
	}
	var out []item
	owner := controllerOf(pod)
	add := func(name string, restart int32, t *corev1.ContainerStateTerminated) {
		if t == nil || restart < 0 || !strings.Contains(t.Message, strings.TrimSpace(contract.CheckpointOutcomePrefix)) {
			return
		}
		out = append(out, item{
			Namespace: pod.Namespace, Pod: pod.Name, UID: pod.UID, Container: name, Restart: restart,
			Message: t.Message, Finished: t.FinishedAt.Time, Owner: owner,
			Disruption: disruption(pod), Deleting: pod.DeletionTimestamp != nil, Queue: pod.Labels[KueueQueueLabel],
		})
	}
	for _, cs := range pod.Status.ContainerStatuses {
		add(cs.Name, cs.RestartCount, cs.State.Terminated)
		add(cs.Name, cs.RestartCount-1, cs.LastTerminationState.Terminated)
	}
	return out
}

func controllerOf(pod *corev1.Pod) metav1.OwnerReference {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
	}
	return metav1.OwnerReference{}
}

// Reconcile reports one termination once. It never returns an error: a
// failed job lookup costs the job's Event, never the pod's Event or the
// metric, and a retry could only report twice.
func (r *Reconciler) Reconcile(ctx context.Context, it item) (reconcile.Result, error) {
	if it.Forget {
		r.mu.Lock()
		delete(r.seen, it.UID)
		r.mu.Unlock()
		return reconcile.Result{}, nil
	}
	if it.Init {
		r.initNamespace(ctx, it.Namespace)
		return reconcile.Result{}, nil
	}
	logger := logFor(ctx, it)
	if !it.Finished.IsZero() && it.Finished.Before(r.started.Add(-backlog)) {
		logger.V(1).Info("not reporting a checkpoint outcome from before trainguard started", "finishedAt", it.Finished)
		return reconcile.Result{}, nil
	}
	if !r.optedIn(ctx, it.Namespace) {
		logger.V(1).Info("ignoring a checkpoint outcome outside opted-in namespaces")
		return reconcile.Result{}, nil
	}
	if !r.markSeen(it) {
		return reconcile.Result{}, nil
	}
	o, err := contract.ParseCheckpointOutcome(it.Message)
	switch {
	case err == contract.ErrNoCheckpointOutcome:
		return reconcile.Result{}, nil
	case err != nil:
		r.metrics.invalid.Inc()
		logger.Info("ignoring an invalid checkpoint outcome in the termination message", "error", err.Error())
		return reconcile.Result{}, nil
	}
	r.report(ctx, logger, it, o)
	return reconcile.Result{}, nil
}

func logFor(ctx context.Context, it item) logr.Logger {
	return log.FromContext(ctx).WithValues("pod", it.Namespace+"/"+it.Pod, "container", it.Container, "restart", it.Restart)
}

// initNamespace creates an opted-in namespace's series at zero, once. The
// namespace label is bounded by what the admin opts in, never by a tenant.
func (r *Reconciler) initNamespace(ctx context.Context, namespace string) {
	r.mu.Lock()
	done := r.inited[namespace]
	r.mu.Unlock()
	if done || !r.optedIn(ctx, namespace) {
		return
	}
	r.metrics.initNamespace(namespace)
	r.mu.Lock()
	r.inited[namespace] = true
	r.mu.Unlock()
}

// markSeen records the termination and reports whether it is new.
func (r *Reconciler) markSeen(it item) bool {
	key := fmt.Sprintf("%s/%d", it.Container, it.Restart)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[it.UID][key] {
		return false
	}
	if r.seen[it.UID] == nil {
		r.seen[it.UID] = map[string]bool{}
	}
	r.seen[it.UID][key] = true
	return true
}

// optedIn applies the webhook's rule (policy.Scope): the managed label
// alone is a label a tenant can write on a pod in any namespace.
func (r *Reconciler) optedIn(ctx context.Context, namespace string) bool {
	scope := policy.Scope{Config: r.cfg, Namespaces: policy.ClientNamespaces(r.client)}
	_, skip, err := scope.Namespace(ctx, namespace)
	if err != nil {
		log.FromContext(ctx).Error(err, "reading namespace for a checkpoint outcome", "namespace", namespace)
	}
	return skip == "" && err == nil
}

// report emits the pod's Event, the job's Event, the metrics and a log line.
func (r *Reconciler) report(ctx context.Context, logger logr.Logger, it item, o contract.CheckpointOutcome) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: it.Namespace, Name: it.Pod, UID: it.UID}}
	job := r.job(ctx, it)
	cause := r.causeOf(ctx, it)
	reason, eventType, note := describe(it.Container, o)
	if cause.words != "" {
		note += "; " + cause.words
	}
	if job != nil {
		r.recorder.Eventf(pod, job, eventType, reason, EventAction, "%s", note)
		r.recorder.Eventf(job, pod, eventType, reason, EventAction, "pod %s: %s", it.Pod, note)
	} else {
		r.recorder.Eventf(pod, nil, eventType, reason, EventAction, "%s", note)
	}
	r.initNamespace(ctx, it.Namespace)
	r.metrics.observe(o, cause.cause, it.Namespace)
	logger.Info("checkpoint outcome", "outcome", o.Outcome, "cause", cause.cause, "step", o.Step, "bytes", o.Bytes,
		"seconds", o.Seconds, "job", jobName(job))
}

func jobName(job *metav1.PartialObjectMetadata) string {
	if job == nil {
		return ""
	}
	return job.Kind + "/" + job.Name
}

// describe words the Event.
func describe(container string, o contract.CheckpointOutcome) (reason, eventType, note string) {
	switch o.Outcome {
	case contract.OutcomeSaved:
		return ReasonSaved, corev1.EventTypeNormal, fmt.Sprintf("container %s: checkpoint saved at step %d (%s) in %.1fs", container, o.Step, humanBytes(o.Bytes), o.Seconds)
	case contract.OutcomeTimeout:
		return ReasonTimeout, corev1.EventTypeWarning, fmt.Sprintf("container %s: checkpoint not acknowledged within %.1fs (last step %d); the job resumes from an older checkpoint", container, o.Seconds, o.Step)
	case contract.OutcomeNoTrainer:
		return ReasonNoTrainer, corev1.EventTypeWarning, fmt.Sprintf("container %s: no trainer was listening for the checkpoint request (%.1fs); is the trainguard SDK's migrator.listening() running?", container, o.Seconds)
	}
	return ReasonFailed, corev1.EventTypeWarning, fmt.Sprintf("container %s: checkpoint failed after %.1fs (step %d); see the agent log on the checkpoint volume", container, o.Seconds, o.Step)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
