// Package warning is trainguard's node-warning controller: when a node
// announces its loss (a condition or taint in nodeWarnings), every job with
// a rank on it is asked, once, to commit a checkpoint now and train on, so
// that the node's loss costs the steps since that checkpoint, not since
// the last periodic one. It stops nothing: a trainer that does not answer
// is reported (Event, metric, log), never stopped. A warning on too many
// nodes at once engages a brake instead (docs/node-warnings.md).
package warning

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/controllers/ownerchain"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// ControllerName names the controller, its logger and its Events' source.
const ControllerName = "trainguard-node-warning"

// Event reasons, on the job (a bare pod: the pod), and on the node for the brake.
const (
	ReasonCheckpointOnWarning = "CheckpointOnWarning"
	ReasonTrainerDidNotAnswer = "TrainerDidNotAnswer"
	ReasonTrainerRateLimited  = "CheckpointNowRateLimited"
	ReasonBrake               = "NodeWarningBrake"
	eventAction               = "CheckpointNow"
)

// brakeRecheck: how soon a warning node held by the brake looks again, so
// its jobs are asked once the brake releases while it still warns.
const brakeRecheck = 10 * time.Second

// maxNoteError bounds an error quoted in an Event: it may carry what a
// trainer (the tenant's) answered.
const maxNoteError = 200

// Setup adds the controller to the leader when enabled (it shares the
// rescheduler's caches: run it only with the rescheduler) and
// nodeWarnings.enabled. trainers reach the trainers' status port.
func Setup(mgr ctrl.Manager, cfg *configv1alpha1.Configuration, kinds jobs.Kinds, namespace string, enabled bool, trainers Trainers) error {
	cfg = cfg.WithDefaults()
	w := cfg.NodeWarnings
	if !enabled || !*w.Enabled {
		return nil
	}
	if errs := configv1alpha1.ValidateNodeWarnings(&w, field.NewPath("nodeWarnings")); len(errs) > 0 {
		return fmt.Errorf("node-warning settings: %w", errs.ToAggregate())
	}
	m, err := newMetrics(crmetrics.Registry)
	if err != nil {
		return err
	}
	r, err := New(Options{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName),
		Config: cfg, Kinds: kinds, Namespace: namespace, Trainers: trainers, metrics: m,
	})
	if err != nil {
		return err
	}
	return r.setupWithManager(mgr)
}

// Options build a Reconciler.
type Options struct {
	// Client reads the cache (nodes, managed pods, namespaces).
	Client client.Client
	// APIReader reads a pod's job (ownerchain), uncached.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Config    *configv1alpha1.Configuration
	Kinds     jobs.Kinds
	// Namespace is trainguard's own (never acted in).
	Namespace string
	Trainers  Trainers
	// Clock: a real one when nil.
	Clock clock.Clock
	// Poll: how often a request's commit is looked for (default 500 ms).
	Poll    time.Duration
	metrics *metrics
}

// Reconciler handles one warning node: it asks each job with a rank there.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.Clock
	cfg       *configv1alpha1.Configuration
	rules     Rules
	limits    Limits
	timeout   time.Duration
	poll      time.Duration
	kinds     jobs.Kinds
	chains    ownerchain.Chains
	namespace string
	trainers  Trainers
	metrics   *metrics

	mu sync.Mutex
	// last is when each job was last asked (the interval).
	last map[jobs.Key]time.Time
	// braked says the brake was engaged when last judged.
	braked bool
}

// New builds a Reconciler from defaulted, checked settings.
func New(o Options) (*Reconciler, error) {
	cfg := o.Config.WithDefaults()
	rules, err := NewRules(cfg.NodeWarnings)
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		client: o.Client, apiReader: o.APIReader, recorder: o.Recorder, clock: o.Clock, cfg: cfg, rules: rules,
		limits: LimitsFrom(cfg.NodeWarnings), timeout: cfg.NodeWarnings.CommitTimeout.Duration, poll: o.Poll,
		kinds: o.Kinds, chains: ownerchain.New(o.Kinds), namespace: o.Namespace, trainers: o.Trainers, metrics: o.metrics,
		last: map[jobs.Key]time.Time{},
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.poll == 0 {
		r.poll = 500 * time.Millisecond
	}
	if r.metrics == nil {
		if r.metrics, err = newMetrics(crmetrics.Registry); err != nil {
			return nil, err
		}
	}
	if r.trainers == nil {
		return nil, errors.New("node-warning controller: no trainer client")
	}
	return r, nil
}

func (r *Reconciler) setupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("node-warning").
		For(&corev1.Node{}, builder.WithPredicates(r.warningsChanged())).
		// Each reconcile may wait up to commitTimeout for a commit: nodes
		// warning together are handled side by side.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// warningsChanged passes a node that appears warning, or whose warnings
// change; heartbeats and every other update do not pass, and a node that
// goes has nothing left to ask.
func (r *Reconciler) warningsChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			n, ok := e.Object.(*corev1.Node)
			return ok && len(r.rules.Warnings(n)) > 0
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			return ok1 && ok2 && strings.Join(r.rules.Warnings(o), ",") != strings.Join(r.rules.Warnings(n), ",")
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// view is the managed pods as the decision needs them.
type view struct {
	// carriers are the nodes carrying managed pods, and whether each warns.
	carriers map[string]bool
	// pods are each job's pods.
	pods map[jobs.Key][]*corev1.Pod
	// on are the jobs with a pod on each node.
	on map[string][]jobs.Key
}

func (v view) warning() int {
	n := 0
	for _, w := range v.carriers {
		if w {
			n++
		}
	}
	return n
}

// Reconcile asks each job with a rank on the node, when it warns.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := log.FromContext(ctx).WithValues("node", req.Name)
	node := &corev1.Node{}
	if err := r.client.Get(ctx, req.NamespacedName, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	warns := r.rules.Warnings(node)
	r.mu.Lock()
	braked := r.braked
	r.mu.Unlock()
	if len(warns) == 0 && !braked {
		return reconcile.Result{}, nil
	}
	v, err := r.look(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	var here []jobs.Key
	if len(warns) > 0 {
		here = v.on[node.Name]
	}
	now := r.clock.Now()
	r.mu.Lock()
	Prune(r.last, now, r.limits.MinInterval)
	plan := Decide(Input{Now: now, Jobs: here, Carriers: len(v.carriers), Warning: v.warning(), LastRequest: r.last, Limits: r.limits})
	for _, k := range plan.Ask {
		r.last[k] = now
	}
	was := r.braked
	r.braked = plan.Brake.On
	r.mu.Unlock()
	r.noteBrake(ctx, node, was, plan.Brake)
	if len(warns) == 0 {
		return reconcile.Result{}, nil
	}
	for _, s := range plan.Skip {
		r.metrics.skipped.WithLabelValues(s.Reason).Inc()
		logger.V(1).Info("job on a warning node not asked", "job", s.Job.String(), "reason", s.Reason, "until", s.Until)
	}
	if plan.Brake.On {
		return reconcile.Result{RequeueAfter: brakeRecheck}, nil
	}
	var wg sync.WaitGroup
	for _, k := range plan.Ask {
		wg.Go(func() { r.ask(ctx, node.Name, warns, k, v) })
	}
	wg.Wait()
	return reconcile.Result{}, nil
}

// look counts the managed pods of the namespaces trainguard acts in, by
// node and job, and which carriers warn.
func (r *Reconciler) look(ctx context.Context) (view, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingLabels{contract.LabelManaged: "true"}); err != nil {
		return view{}, fmt.Errorf("listing managed pods: %w", err)
	}
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes); err != nil {
		return view{}, fmt.Errorf("listing nodes: %w", err)
	}
	warning := map[string]bool{}
	for i := range nodes.Items {
		warning[nodes.Items[i].Name] = len(r.rules.Warnings(&nodes.Items[i])) > 0
	}
	v := view{carriers: map[string]bool{}, pods: map[jobs.Key][]*corev1.Pod{}, on: map[string][]jobs.Key{}}
	// The managed label is anyone's to write: only pods of namespaces
	// trainguard acts in count (policy.Scope, the webhook's own rule).
	scope := policy.Scope{Config: r.cfg, OwnNamespace: r.namespace, Namespaces: policy.ClientNamespaces(r.client)}
	acts := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		in, seen := acts[p.Namespace]
		if !seen {
			_, skip, err := scope.Namespace(ctx, p.Namespace)
			if err != nil {
				return view{}, err
			}
			in = skip == ""
			acts[p.Namespace] = in
		}
		if !in {
			continue
		}
		v.carriers[p.Spec.NodeName] = warning[p.Spec.NodeName]
		k := r.kinds.KeyOf(p)
		v.pods[k] = append(v.pods[k], p)
		v.on[p.Spec.NodeName] = append(v.on[p.Spec.NodeName], k)
	}
	return v, nil
}

// noteBrake says when the brake engages (an Event on the node that found
// it, a log line) and releases (a log line), and keeps the gauge.
func (r *Reconciler) noteBrake(ctx context.Context, node *corev1.Node, was bool, b Brake) {
	logger := log.FromContext(ctx)
	switch {
	case b.On && !was:
		r.metrics.brakeEngaged.Set(1)
		msg := b.Why + ": the warning source (an agent, a rule in nodeWarnings) is suspected, not the nodes; " +
			"no checkpoint-now request is sent until it clears (nodeWarnings.brakeThreshold)"
		r.recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonBrake, eventAction, "%s", msg)
		logger.Info("node-warning brake engaged", "why", msg)
	case !b.On && was:
		r.metrics.brakeEngaged.Set(0)
		logger.Info("node-warning brake released", "why", b.Why)
	}
}

// ask sends one job its request, through the first of its pods that
// answers, and waits for the commit, within commitTimeout.
func (r *Reconciler) ask(ctx context.Context, node string, warns []string, k jobs.Key, v view) {
	warned := strings.Join(warns, ", ")
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	start := r.clock.Now()
	candidates := Candidates(v.pods[k], func(n string) bool { return v.carriers[n] })
	var tried []string
	for _, p := range candidates {
		step, err := r.trainers.RequestCheckpoint(ctx, p.Status.PodIP, "node "+node+" warns: "+warned)
		if errors.Is(err, ErrRateLimited) {
			r.report(ctx, k, p, OutcomeRateLimited, corev1.EventTypeNormal, ReasonTrainerRateLimited, fmt.Sprintf(
				"node %s warns (%s): pod %s's trainer refused the checkpoint-now request, it committed on request within its own interval",
				node, warned, p.Name))
			return
		}
		if err != nil {
			tried = append(tried, p.Name+": "+bounded(err))
			continue
		}
		committed, err := r.waitCommitted(ctx, p.Status.PodIP, step)
		if err != nil {
			r.report(ctx, k, p, OutcomeTimeout, corev1.EventTypeWarning, ReasonTrainerDidNotAnswer, fmt.Sprintf(
				"node %s warns (%s): pod %s's trainer acknowledged step %d but did not commit it within %s (nodeWarnings.commitTimeout): %s; "+
					"the job trains on, nothing is stopped", node, warned, p.Name, step, r.timeout, bounded(err)))
			return
		}
		r.report(ctx, k, p, OutcomeCommitted, corev1.EventTypeNormal, ReasonCheckpointOnWarning, fmt.Sprintf(
			"node %s warns (%s): step %d committed %.1fs after the checkpoint-now request to pod %s; the job trains on",
			node, warned, committed, r.clock.Since(start).Seconds(), p.Name))
		return
	}
	why := "no running pod of the job has a pod IP of its own"
	if len(tried) > 0 {
		why = strings.Join(tried, "; ")
	}
	var regarding *corev1.Pod
	if len(v.pods[k]) > 0 {
		regarding = v.pods[k][0]
	}
	r.report(ctx, k, regarding, OutcomeUnanswered, corev1.EventTypeWarning, ReasonTrainerDidNotAnswer, fmt.Sprintf(
		"node %s warns (%s): no trainer of the job answered the checkpoint-now request (%s); the job trains on, nothing is stopped",
		node, warned, why))
}

// waitCommitted polls the trainer's status until its committed step
// reaches step; the context's end is the error.
func (r *Reconciler) waitCommitted(ctx context.Context, podIP string, step int64) (int64, error) {
	var last error
	for {
		_, committed, err := r.trainers.Status(ctx, podIP)
		switch {
		case err != nil:
			last = err
		case committed != nil && *committed >= step:
			return *committed, nil
		case committed != nil:
			last = fmt.Errorf("last committed step %d", *committed)
		default:
			last = errors.New("nothing committed yet")
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%v)", ctx.Err(), last)
		case <-time.After(r.poll):
		}
	}
}

// report emits the outcome's Event on the job (on the pod when it has no
// job trainguard can read), the metric and a log line.
func (r *Reconciler) report(ctx context.Context, k jobs.Key, pod *corev1.Pod, outcome, eventType, reason, note string) {
	r.metrics.requests.WithLabelValues(outcome).Inc()
	log.FromContext(ctx).Info("checkpoint on node warning", "job", k.String(), "outcome", outcome, "note", note)
	if pod == nil {
		return
	}
	var regarding runtime.Object = pod
	if ref := metav1.GetControllerOf(pod); ref != nil {
		job, err := r.chains.Job(ctx, r.apiReader, pod.Namespace, *ref)
		if err != nil {
			log.FromContext(ctx).Info("cannot read the job of a warned pod; the pod gets the Event", "pod", pod.Namespace+"/"+pod.Name, "error", err.Error())
		}
		if job != nil {
			regarding = job
		}
	}
	r.recorder.Eventf(regarding, nil, eventType, reason, eventAction, "%s", note)
}

func bounded(err error) string {
	s := err.Error()
	if len(s) > maxNoteError {
		return s[:maxNoteError] + "..."
	}
	return s
}
