package rescheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/controllers/ownerchain"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// IndexPodNodeName indexes cached pods by spec.nodeName, so a Node event
// finds its pods without listing every pod.
const IndexPodNodeName = "spec.nodeName"

// Setup registers the controller when cfg.Rescheduler.Enabled. It runs
// only on the leader (the manager's default for controllers), while every
// replica's cache serves the pod webhook's NewBadNodeStore. kinds are the
// job kinds the process serves (a pod's job is found by theirs); namespace
// is trainguard's own (serve --namespace), where the records live.
func Setup(mgr ctrl.Manager, cfg *configv1alpha1.Configuration, kinds jobs.Kinds, namespace string) error {
	cfg = cfg.WithDefaults()
	opts := cfg.Rescheduler
	if !*opts.Enabled {
		return nil
	}
	// Loading checked the file and the flags; a Configuration built in code
	// gets the same check, in the same words, less the floors on an
	// operator's timing (configv1alpha1.Validate), which the suites
	// compress the kubelet's time below.
	if errs := configv1alpha1.ValidateRescheduler(&opts, field.NewPath("rescheduler")); len(errs) > 0 {
		return fmt.Errorf("rescheduler settings: %w", errs.ToAggregate())
	}
	if namespace == "" {
		return errors.New("trainguard's namespace is empty: set --namespace (or $POD_NAMESPACE); the rescheduler keeps its records there")
	}
	m := newMetrics()
	if err := m.register(crmetrics.Registry); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, IndexPodNodeName, podNodeName); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	keys, err := carrierIndex(mgr)
	if err != nil {
		return err
	}
	r := newReconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(ControllerName), clock.RealClock{}, cfg, kinds, namespace, m, keys)
	if err := mgr.Add(&sweeper{r: r}); err != nil {
		return fmt.Errorf("adding the record sweeper: %w", err)
	}
	silent := make(chan event.GenericEvent)
	if err := mgr.Add(&leaseWatcher{r: r, events: silent}); err != nil {
		return fmt.Errorf("adding the node Lease watcher: %w", err)
	}
	return r.setupWithManager(mgr, silent)
}

func newReconciler(c client.Client, apiReader client.Reader, rec events.EventRecorder, clk clock.PassiveClock,
	cfg *configv1alpha1.Configuration, kinds jobs.Kinds, namespace string, m *metrics, carrierKeys func(context.Context) ([]string, error)) *Reconciler {
	l := newLeases(clk)
	return &Reconciler{
		client: c, apiReader: apiReader, recorder: rec, clock: clk, cfg: cfg, opts: cfg.Rescheduler, namespace: namespace, metrics: m,
		brakes: newBrakes(cfg.Rescheduler, brakeInputs{cache: c, apiReader: apiReader, leases: l, carrierKeys: carrierKeys,
			scope:   policy.Scope{Config: cfg, OwnNamespace: namespace, Namespaces: policy.ClientNamespaces(c)},
			metrics: m, clock: clk, lostAfter: cfg.Rescheduler.LeaseLostAfter.Duration}),
		blocked: map[types.NamespacedName]blockedPod{}, leases: l,
		kinds: kinds, chains: ownerchain.New(kinds),
	}
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
	// apiReader reads what is not cached (the job's annotations, a bare
	// pod's full spec); used only when a pod needs action, which is rare.
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.PassiveClock
	cfg       *configv1alpha1.Configuration
	// opts is cfg.Rescheduler, named for the many reads.
	opts Options
	// namespace is trainguard's own, where the records live.
	namespace string
	metrics   *metrics
	brakes    *brakes

	// leases tells how long each node's kubelet has been silent.
	leases *leases
	// kinds find a pod's job (jobs.Kinds.KeyOf), chains the job's object.
	kinds  jobs.Kinds
	chains ownerchain.Chains

	// held: the holds already said (holdBack), so a recheck is not news.
	held heldNotes

	// blocked counts refused evictions per pod, for the retry backoff.
	mu      sync.Mutex
	blocked map[types.NamespacedName]blockedPod
}

func (r *Reconciler) setupWithManager(mgr ctrl.Manager, silent <-chan event.GenericEvent) error {
	managed := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[contract.LabelManaged] == "true"
	})
	records := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == r.namespace && o.GetLabels()[contract.LabelBadNodes] == "true"
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("rescheduler").
		For(&corev1.Pod{}, builder.WithPredicates(managed)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.podsOnNode), builder.WithPredicates(nodeChanged())).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.stashedPodOf), builder.WithPredicates(records)).
		WatchesRawSource(source.Channel(silent, handler.EnqueueRequestsFromMapFunc(r.podsOnNode))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.ConcurrentReconciles}).
		Complete(r)
}

// nodeChanged passes node events that can change a decision: a node appears
// or goes, or its readiness flips. Heartbeats and cordons do not pass.
// Expiry of the grace is not an event: pods requeue themselves for it.
func nodeChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, ok1 := e.ObjectOld.(*corev1.Node)
			newNode, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			return readyStatus(oldNode) != readyStatus(newNode)
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
	if err := r.client.List(ctx, &pods, client.MatchingFields{IndexPodNodeName: o.GetName()}, client.MatchingLabels{contract.LabelManaged: "true"}); err != nil {
		log.FromContext(ctx).Error(err, "listing pods on node", "node", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pods.Items))
	for i := range pods.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])})
	}
	return reqs
}

// stashedPodOf maps a record holding a stashed bare pod to that pod, so a
// recreation interrupted by a restart or a leader change is resumed. The
// pod's name comes from the record's job field, checked by decodeRecord.
func (r *Reconciler) stashedPodOf(_ context.Context, o client.Object) []reconcile.Request {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok || cm.Data[dataStash] == "" {
		return nil
	}
	key, ok := jobs.ParseKey(cm.Data[dataJob], cm.Data[dataAPIVersion])
	if !ok || !key.Bare() || cm.Name != RecordName(key) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: key.Namespace, Name: key.Name}}}
}

// Reconcile decides about one pod and carries the decision out.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetBlocked(req.NamespacedName)
			return r.recreatePending(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, fmt.Errorf("getting pod %s: %w", req, err)
	}
	if pod.Labels[contract.LabelManaged] != "true" || pod.Spec.NodeName == "" {
		return reconcile.Result{}, nil
	}
	if ok, err := r.optedIn(ctx, pod.Namespace, pod.Annotations); !ok || err != nil {
		return reconcile.Result{}, err
	}
	node, err := r.node(ctx, pod.Spec.NodeName)
	if err != nil {
		return reconcile.Result{}, err
	}
	key := r.kinds.KeyOf(pod)
	cm, rec, err := r.loadRecord(ctx, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && rec.JobUID != "" && rec.JobUID != ref.UID {
		rec = Record{} // an earlier job of the same name: start afresh (the record is overwritten)
	}
	if key.Bare() && rec.Stash != nil && pod.UID != rec.Stash.UID {
		// The replacement exists: the last recreation stopped before it
		// cleared the stash.
		return reconcile.Result{}, r.clearStash(ctx, key, cm, &rec)
	}
	// Decide, brake once, act.
	d := Decide(r.input(pod, node, &rec, nil), r.opts)
	areaJudged := d.Cause == ReasonNodeLost && acts(d)
	if areaJudged {
		if h := r.brakes.areaHold(ctx, node); h != nil {
			// Held whatever the job's policy says: no API read for it
			// (TestBrakedZoneNeedsNoJobRead: a silent zone of 500 nodes is
			// ~5,000 such reads).
			return r.holdBack(ctx, pod, key, d, h), nil
		}
	}
	if actionable(d) {
		// The job may set trainguard.io/max-reschedules or the defaults;
		// read it now that it matters, and decide again with it.
		d = Decide(r.input(pod, node, &rec, r.jobAnnotations(ctx, pod)), r.opts)
	}
	// Every eviction or delete passes the storm brakes first, the area
	// brakes once.
	var h *hold
	switch {
	case !acts(d):
	case areaJudged:
		h = r.brakes.admit(ctx, pod, d)
	default:
		h = r.brakes.check(ctx, pod, node, d)
	}
	if h != nil {
		return r.holdBack(ctx, pod, key, d, h), nil
	}
	return r.carryOut(ctx, pod, key, cm, &rec, d)
}

// optedIn checks, with the webhook's own predicate, that the webhook would
// inject the pod: the managed label alone is anyone's to set.
func (r *Reconciler) optedIn(ctx context.Context, namespace string, podAnnotations map[string]string) (bool, error) {
	ok, why, err := r.injects(ctx, namespace, podAnnotations)
	if !ok && err == nil {
		r.metrics.podsIgnored.WithLabelValues("not-opted-in").Inc()
		log.FromContext(ctx).V(1).Info("leaving a pod labelled managed alone: the webhook would not inject it", "namespace", namespace, "why", why)
	}
	return ok, err
}

// injects is the webhook's decision (policy.Scope) for a pod of namespace;
// why says why not.
func (r *Reconciler) injects(ctx context.Context, namespace string, podAnnotations map[string]string) (bool, string, error) {
	scope := policy.Scope{Config: r.cfg, OwnNamespace: r.namespace, Namespaces: policy.ClientNamespaces(r.client)}
	_, why, err := scope.Object(ctx, namespace, podAnnotations)
	return why == "" && err == nil, why, err
}

// acts says d evicts or deletes the pod.
func acts(d Decision) bool {
	switch d.Action {
	case ActionEvict, ActionEvictNow, ActionForceDelete:
		return true
	}
	return false
}

// actionable says the decision depends on the job's policy (cap, defaults).
func actionable(d Decision) bool {
	switch d.Cause {
	case ReasonNodeLost, ReasonRetryableExit:
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
	silentFor, known := r.leases.silentFor(pod.Spec.NodeName)
	return Input{
		Pod:                    pod,
		Node:                   node,
		Now:                    now,
		KubeletSilentFor:       silentFor,
		LeaseKnown:             known,
		DefaultFaultScheduling: pol.FaultScheduling,
		DefaultRecoverStrategy: pol.RecoverStrategy,
		TrainingContainers:     pol.TrainingContainers,
		MaxReschedules:         pol.MaxReschedules,
		History: History{
			Reschedules:  rec.Reschedules,
			RoundStart:   rec.RoundStart,
			NodeRecorded: rec.Recorded(pod.Spec.NodeName, now),
			// The count and the stop are the job's, kept in trainguard's
			// namespace: nothing a tenant writes can raise the count's
			// allowance or lift the stop.
			InPlaceRestarts: rec.InPlaceRestarts,
			InPlaceStopped:  rec.InPlaceStopped,
		},
	}
}

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

// loadRecord reads the job's record from trainguard's namespace (cached);
// cm is nil when there is none. A record that fails to parse or does not
// match the job is reported and treated as absent: it is never acted on,
// and the next write replaces it.
func (r *Reconciler) loadRecord(ctx context.Context, key jobs.Key) (*corev1.ConfigMap, Record, error) {
	cm := &corev1.ConfigMap{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: RecordName(key)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, Record{}, nil
		}
		return nil, Record{}, fmt.Errorf("getting bad-node record of %s: %w", key, err)
	}
	rec, err := decodeRecord(cm, key)
	if err != nil {
		r.ignoreRecord(ctx, cm, err)
		return cm, Record{}, nil
	}
	return cm, rec, nil
}

// ignoreRecord reports a record that is not acted on: Event (about the
// ConfigMap, in trainguard's namespace), metric and log line.
func (r *Reconciler) ignoreRecord(ctx context.Context, cm *corev1.ConfigMap, err error) {
	reason := "invalid"
	if re, ok := err.(*recordError); ok {
		reason = re.reason
	}
	r.metrics.recordsIgnored.WithLabelValues(reason).Inc()
	r.recorder.Eventf(cm, nil, corev1.EventTypeWarning, ReasonRecordIgnored, "Ignore", "record ignored, nothing acted on: %v", err)
	log.FromContext(ctx).Info("bad-node record ignored, nothing acted on", "configMap", cm.Namespace+"/"+cm.Name, "reason", reason, "error", err.Error())
}
