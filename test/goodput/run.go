package goodput

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Arm is one way of running the job.
type Arm struct {
	Name      string
	Namespace string
	// Trainguard: the namespace is opted in (trainguard.io/inject) and the
	// job is written without a checkpoint volume (trainguard mounts it).
	// Otherwise the job mounts the claim at /checkpoint itself, as a user
	// of the SDK without trainguard does.
	Trainguard bool
	// InProcess: the job opts in to in-process recovery
	// (trainguard.io/in-process-recovery): the webhook runs the trainer
	// under the SDK's supervisor, which restarts a trainer a signal killed
	// in its container while the other rank keeps its process. The
	// container's shell execs the trainer, so the supervisor's child is the
	// trainer and sees it die of its signal.
	InProcess bool
	// KueueRecovery: the pods carry kueue.x-k8s.io/safe-to-forcefully-delete
	// (Kueue's FailureRecoveryPolicy, feature gate on in Kueue).
	KueueRecovery bool
	// Plain: the trainer as users write it without trainguard (its
	// --plain mode): no SDK, torch.save every SaveEvery steps to the
	// claim, the newest file loaded on start, survivors of a dead rank
	// waiting in gloo until its timeout. Otherwise the trainer uses the SDK.
	Plain bool
}

// Arms are the three arms: trainguard's, and plain Kubernetes and Kueue's
// recovery each running the users' own trainer (Plain).
func Arms(prefix string) []Arm {
	return []Arm{
		{Name: "trainguard", Namespace: prefix + "-trainguard", Trainguard: true, InProcess: true},
		{Name: "plain", Namespace: prefix + "-plain", Plain: true},
		{Name: "kueue-recovery", Namespace: prefix + "-kueue", KueueRecovery: true, Plain: true},
	}
}

// Config is one run.
type Config struct {
	Kubectl string // kubectl binary (talks to the cluster with $KUBECONFIG)
	// Hook is the node hook: `HOOK crash|restore|partition|heal NODE` and
	// `HOOK claim NAMESPACE CLAIM` (docs/goodput.md).
	Hook  string
	Image string
	// PullPolicy of the trainer image (IfNotPresent if empty; Never on the
	// local cluster, which refuses pods that could pull).
	PullPolicy string
	Claim      string // the RWX claim every arm's namespace gets (through the hook)
	Arms       []Arm
	Events     []Event
	Interval   time.Duration // the last event's interval; also how long drains, partitions and preemptions last
	// Repair is how long a crashed node stays dead (a dead machine waits
	// for a person; 0: 5 minutes); restored at the end of the run at the
	// latest.
	Repair    time.Duration
	Duration  time.Duration // 0: the last event's time + Interval
	StepDelay float64       // seconds the trainer sleeps per step (a fixed step time)
	SaveEvery int           // periodic checkpoint every N steps
	// Namespace makes an arm's namespace with the claim; nil: created here
	// (opted in when the arm is trainguard's) and the claim made by the hook.
	Namespace func(ctx context.Context, arm Arm) error
	Logf      func(format string, args ...any)
	// TrainguardNamespace is where trainguard runs (its pods labelled
	// app.kubernetes.io/name=trainguard): the end-of-run state quotes its
	// log lines about the trainguard arm. Empty: trainguard-system.
	TrainguardNamespace string
}

// Result is what a run measured.
type Result struct {
	Start, End time.Time
	Events     []Applied
	Arms       []ArmResult
	Corrupt    []string
	Floors     Floors        // measured at the run's start (FloorsOf)
	Hold       time.Duration // how long a preemption holds the quota or the node
}

// Applied is one disruption as it happened.
type Applied struct {
	Event
	T      time.Time
	Target string   // the node, or the pod per arm
	Hit    []string // a node kind's: the arms with a running pod on Target
	Note   string   // what the disruption did or why it could not
}

// ArmResult is one arm's figures.
type ArmResult struct {
	Arm      Arm
	Series   Series
	StepTime time.Duration
	ETTR     float64
	Steps    int // committed steps in the window
	Impacts  []Impact
	Costs    []Cost // per disruption, as Impacts
}

const (
	jobName  = "goodput"
	queue    = "goodput"
	lowWPC   = "goodput-low"
	highWPC  = "goodput-high"
	urgentPC = "goodput-urgent"
	raiseAt  = "/tmp/goodput-raise"
	cpuReq   = "50m"
	// quota of each arm's ClusterQueue: the job fits, the high job asks all.
	quotaCPU = "300m"
)

var (
	pytorchJobs   = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}
	clusterQueues = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	localQueues   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	flavors       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	wpcs          = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloadpriorityclasses"}
)

// Runner runs one configuration against a cluster.
type Runner struct {
	cfg Config
	cs  kubernetes.Interface
	dyn dynamic.Interface

	mu      sync.Mutex
	lines   map[string][]string    // arm → log lines seen
	samples map[string][]PodSample // arm → its pods' training containers, as polled
}

// New makes a runner.
func New(cfg Config, cs kubernetes.Interface, dyn dynamic.Interface) *Runner {
	if cfg.Logf == nil {
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	}
	if cfg.Repair == 0 {
		cfg.Repair = 5 * time.Minute
	}
	if cfg.TrainguardNamespace == "" {
		cfg.TrainguardNamespace = "trainguard-system"
	}
	if cfg.PullPolicy == "" {
		cfg.PullPolicy = string(corev1.PullIfNotPresent)
	}
	if cfg.Duration == 0 && len(cfg.Events) > 0 {
		cfg.Duration = cfg.Events[len(cfg.Events)-1].At + cfg.Interval
	}
	return &Runner{cfg: cfg, cs: cs, dyn: dyn, lines: map[string][]string{}, samples: map[string][]PodSample{}}
}

// Run sets the arms up, starts the job in each, waits until every arm
// trains, applies the schedule, and measures. The caller removes the
// namespaces (Cleanup).
func (r *Runner) Run(ctx context.Context) (*Result, error) {
	if err := r.setup(ctx); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	for _, a := range r.cfg.Arms {
		if err := r.create(ctx, r.job(a)); err != nil {
			return nil, fmt.Errorf("%s: create job: %w", a.Name, err)
		}
	}
	collectCtx, stopCollect := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.collect(collectCtx) }()
	defer func() { stopCollect(); <-done }()
	if err := r.waitTraining(ctx, 5, 6*time.Minute); err != nil {
		return nil, err
	}
	res := &Result{Start: time.Now()}
	r.cfg.Logf("goodput: every arm trains; schedule starts at %s, ends after %s", res.Start.Format(time.RFC3339), r.cfg.Duration)
	var heals []heal
	defer func() { healDue(heals, time.Time{}) }() // an aborted run leaves no node broken
	for _, ev := range r.cfg.Events {
		if err := sleepUntil(ctx, res.Start.Add(ev.At)); err != nil {
			return nil, err
		}
		heals = healDue(heals, time.Now())
		ap, h := r.apply(ctx, ev)
		if h.f != nil {
			heals = append(heals, h)
		}
		r.cfg.Logf("goodput: %s: %s on %s: %s", ev.At.Round(time.Second), ev.Kind, ap.Target, ap.Note)
		res.Events = append(res.Events, ap)
	}
	end := res.Start.Add(r.cfg.Duration)
	for i := 0; i < len(heals); { // a crashed node may come back inside the last interval
		h := heals[i]
		if h.due.IsZero() || !h.due.Before(end) {
			i++
			continue
		}
		if err := sleepUntil(ctx, h.due); err != nil {
			return nil, err
		}
		heals = slices.Delete(heals, i, i+1)
		h.f()
	}
	if err := sleepUntil(ctx, end); err != nil {
		return nil, err
	}
	res.End = time.Now()
	r.snapshot(ctx)
	heals = healDue(heals, time.Time{})
	r.collectOnce(ctx)
	r.analyse(res)
	return res, nil
}

// heal ends a disruption: at the next disruption (due zero) or at due.
type heal struct {
	due time.Time
	f   func()
}

// healDue runs the heals due by now (zero now: all of them) and returns
// the others.
func healDue(hs []heal, now time.Time) []heal {
	var left []heal
	for _, h := range hs {
		if now.IsZero() || h.due.IsZero() || !h.due.After(now) {
			h.f()
		} else {
			left = append(left, h)
		}
	}
	return left
}

func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(t)):
		return nil
	}
}

// analyse computes every arm's figures from the logs collected.
func (r *Runner) analyse(res *Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	series := make([]Series, len(r.cfg.Arms))
	tls := make([]Timeline, len(r.cfg.Arms))
	for i, a := range r.cfg.Arms {
		tls[i] = NewTimeline(r.lines[a.Name], r.samples[a.Name])
		series[i] = tls[i].Series
	}
	res.Floors, res.Hold = FloorsOf(tls...), r.cfg.Interval/3
	losses := Losses(series...)
	for i, a := range r.cfg.Arms {
		s, tl := series[i], tls[i]
		ar := ArmResult{Arm: a, Series: s, StepTime: s.StepTime()}
		ar.ETTR = ETTR(s, ar.StepTime, res.Start, res.End)
		ar.Steps = s.Progress(res.End) - s.Progress(res.Start)
		for i, ev := range res.Events {
			end := res.End
			if i+1 < len(res.Events) {
				end = res.Events[i+1].T
			}
			ar.Impacts = append(ar.Impacts, ImpactOf(s, ar.StepTime, ev.T, end))
			ar.Costs = append(ar.Costs, CostOf(tl, ar.StepTime, ev.T, end))
		}
		res.Corrupt = append(res.Corrupt, Corruption(a.Name, s, losses, 2*time.Minute)...)
		res.Arms = append(res.Arms, ar)
	}
}

// ---- cluster objects ----

func (r *Runner) setup(ctx context.Context) error {
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: urgentPC}, Value: 1000,
		Description: "goodput: urgent work that preempts training pods (scheduler preemption)"}
	if _, err := r.cs.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	objs := []*unstructured.Unstructured{
		obj("ResourceFlavor", "", "goodput-flavor", nil),
		obj("WorkloadPriorityClass", "", lowWPC, map[string]any{"value": int64(100)}),
		obj("WorkloadPriorityClass", "", highWPC, map[string]any{"value": int64(1000)}),
	}
	for _, o := range objs {
		if err := r.create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s %s: %w (is Kueue installed?)", o.GetKind(), o.GetName(), err)
		}
	}
	for _, a := range r.cfg.Arms {
		if err := r.namespace(ctx, a); err != nil {
			return fmt.Errorf("%s: namespace: %w", a.Name, err)
		}
		cq := obj("ClusterQueue", "", a.Namespace, nil)
		cq.Object["spec"] = map[string]any{
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": a.Namespace}},
			"preemption":        map[string]any{"withinClusterQueue": "LowerPriority"},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu", "memory"},
				"flavors": []any{map[string]any{"name": "goodput-flavor", "resources": []any{
					map[string]any{"name": "cpu", "nominalQuota": quotaCPU},
					map[string]any{"name": "memory", "nominalQuota": "8Gi"},
				}}},
			}},
		}
		lq := obj("LocalQueue", a.Namespace, queue, map[string]any{"clusterQueue": a.Namespace})
		for _, o := range []*unstructured.Unstructured{cq, lq} {
			if err := r.create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
	}
	return r.createNamespace(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: urgentNS(r.cfg.Arms)}})
}

// createNamespace creates ns, or finds it there. One still terminating
// (the previous run's Cleanup on the same cluster) is waited out first:
// nothing can be created in it.
func (r *Runner) createNamespace(ctx context.Context, ns *corev1.Namespace) error {
	return wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		old, err := r.cs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
		if err == nil && old.DeletionTimestamp != nil {
			return false, nil
		}
		if _, err := r.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
		return true, nil
	})
}

func urgentNS(arms []Arm) string { return arms[0].Namespace + "-urgent" }

func (r *Runner) namespace(ctx context.Context, a Arm) error {
	if r.cfg.Namespace != nil {
		return r.cfg.Namespace(ctx, a)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.Namespace}}
	if a.Trainguard {
		ns.Annotations = map[string]string{"trainguard.io/inject": "enabled"}
	}
	if err := r.createNamespace(ctx, ns); err != nil {
		return err
	}
	_, err := r.run(ctx, r.cfg.Hook, "claim", a.Namespace, r.cfg.Claim)
	return err
}

// Cleanup deletes what Run made (namespaces, queues, classes).
func (r *Runner) Cleanup(ctx context.Context) {
	for _, a := range r.cfg.Arms {
		_ = r.cs.CoreV1().Namespaces().Delete(ctx, a.Namespace, metav1.DeleteOptions{})
		_ = r.dyn.Resource(clusterQueues).Delete(ctx, a.Namespace, metav1.DeleteOptions{})
	}
	_ = r.cs.CoreV1().Namespaces().Delete(ctx, urgentNS(r.cfg.Arms), metav1.DeleteOptions{})
}

// obj is a Kueue object.
func obj(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind}}
	u.SetName(name)
	if ns != "" {
		u.SetNamespace(ns)
	}
	if kind == "WorkloadPriorityClass" {
		for k, v := range spec {
			u.Object[k] = v
		}
	} else if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func (r *Runner) create(ctx context.Context, u *unstructured.Unstructured) error {
	gv, _ := schema.ParseGroupVersion(u.GetAPIVersion())
	gvr := map[string]schema.GroupVersionResource{
		"PyTorchJob": pytorchJobs, "ClusterQueue": clusterQueues, "LocalQueue": localQueues,
		"ResourceFlavor": flavors, "WorkloadPriorityClass": wpcs,
	}[u.GetKind()]
	if gvr.Group != gv.Group {
		return fmt.Errorf("no resource for %s", u.GetKind())
	}
	var err error
	if u.GetNamespace() == "" {
		_, err = r.dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{})
	} else {
		_, err = r.dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
	}
	return err
}

// Script is the trainer's command: the repository's example trainer (DDP
// over gloo, through the SDK or, plain, without it, saving to the claim
// mounted at /checkpoint) with a fixed step time and periodic checkpoints.
// Under trainguard's supervisor (exec) the shell execs the trainer: the
// supervisor, PID 1, forwards SIGTERM and must see its child die of a
// signal (a shell around it would exit 128+n). Otherwise it runs under sh,
// which forwards SIGTERM: a python3 PID 1 ignores it.
func Script(steps int, delay float64, saveEvery int, plain, exec bool) string {
	train := fmt.Sprintf("python3 /opt/trainguard/trainer/train.py --steps %d --step-delay %g --save-every %d --raise-if-exists %s",
		steps, delay, saveEvery, raiseAt)
	if plain {
		train += " --plain --ckpt-dir /checkpoint"
	}
	if exec {
		return "exec " + train
	}
	return strings.Join([]string{
		train + " & pid=$!",
		`trap 'kill -TERM $pid' TERM`,
		`wait $pid; rc=$?`,
		`if kill -0 $pid 2>/dev/null; then wait $pid; rc=$?; fi`,
		`exit $rc`,
	}, "; ")
}

// job is the arm's PyTorchJob: master + 1 worker, restartPolicy OnFailure
// (the operator's defaults otherwise), queued in Kueue at low priority,
// ranks placed by rank (affinity), one BLAS thread (so every arm's
// arithmetic is identical and a loss compares across arms).
func (r *Runner) job(a Arm) *unstructured.Unstructured {
	script := Script(10_000_000, r.cfg.StepDelay, r.cfg.SaveEvery, a.Plain, a.InProcess)
	spec := func(rt string) map[string]any {
		c := map[string]any{
			"name": "pytorch", "image": r.cfg.Image, "imagePullPolicy": r.cfg.PullPolicy,
			"command":   []any{"/bin/sh", "-c", script},
			"env":       []any{map[string]any{"name": "OMP_NUM_THREADS", "value": "1"}},
			"resources": map[string]any{"requests": map[string]any{"cpu": cpuReq, "memory": "200Mi"}},
		}
		pod := map[string]any{
			"terminationGracePeriodSeconds": int64(30),
			"containers":                    []any{c},
			"affinity":                      r.affinity(rt),
		}
		if !a.Trainguard {
			c["volumeMounts"] = []any{map[string]any{"name": "checkpoints", "mountPath": "/checkpoint"}}
			pod["volumes"] = []any{map[string]any{"name": "checkpoints", "persistentVolumeClaim": map[string]any{"claimName": r.cfg.Claim}}}
		}
		tmpl := map[string]any{"spec": pod}
		if a.KueueRecovery {
			tmpl["metadata"] = map[string]any{"annotations": map[string]any{"kueue.x-k8s.io/safe-to-forcefully-delete": "true"}}
		}
		return map[string]any{"replicas": int64(1), "restartPolicy": "OnFailure", "template": tmpl}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"spec": map[string]any{
			"pytorchReplicaSpecs": map[string]any{"Master": spec("master"), "Worker": spec("worker")},
		},
	}}
	u.SetName(jobName)
	u.SetNamespace(a.Namespace)
	u.SetLabels(map[string]string{"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/priority-class": lowWPC})
	if a.InProcess {
		u.SetAnnotations(map[string]string{contract.AnnotationInProcessRecovery: "enabled"})
	}
	return u
}

// affinity places a pod of replica type rt (master or worker) by rank, the
// same in every arm: away from its own job's other rank, with the same rank
// of the other arms and away from their other rank (all preferred, so a
// lost node's pods still find a place). A node then hosts one rank of every
// arm or none, and a node disruption hits every arm alike: placed freely,
// the arms' pods fell unevenly, and a crash met two arms and spared the
// third (whose ETTR then said nothing about its recovery).
func (r *Runner) affinity(rt string) map[string]any {
	other := "worker"
	if rt == "worker" {
		other = "master"
	}
	var nss []any
	for _, a := range r.cfg.Arms {
		nss = append(nss, a.Namespace)
	}
	term := func(weight int64, typ string, allArms bool) map[string]any {
		sel := map[string]any{"training.kubeflow.org/job-name": jobName}
		if typ != "" {
			sel["training.kubeflow.org/replica-type"] = typ
		}
		t := map[string]any{"topologyKey": "kubernetes.io/hostname", "labelSelector": map[string]any{"matchLabels": sel}}
		if allArms {
			t["namespaceSelector"] = map[string]any{"matchExpressions": []any{map[string]any{
				"key": "kubernetes.io/metadata.name", "operator": "In", "values": nss,
			}}}
		}
		return map[string]any{"weight": weight, "podAffinityTerm": t}
	}
	return map[string]any{
		"podAntiAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
			term(100, "", false), term(100, other, true),
		}},
		"podAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
			term(100, rt, true),
		}},
	}
}

// highJob is Kueue preemption's higher-priority job: one pod asking the
// arm's whole quota for hold.
func (r *Runner) highJob(a Arm, hold time.Duration) *unstructured.Unstructured {
	c := map[string]any{
		"name": "pytorch", "image": r.cfg.Image, "imagePullPolicy": r.cfg.PullPolicy,
		"command":   []any{"python3", "-c", fmt.Sprintf("import time; time.sleep(%d)", int(hold.Seconds()))},
		"resources": map[string]any{"requests": map[string]any{"cpu": quotaCPU, "memory": "64Mi"}},
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{"Master": map[string]any{
			"replicas": int64(1), "restartPolicy": "OnFailure",
			"template": map[string]any{"spec": map[string]any{"containers": []any{c}}},
		}}},
	}}
	u.SetName(jobName + "-high")
	u.SetNamespace(a.Namespace)
	u.SetLabels(map[string]string{"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/priority-class": highWPC})
	return u
}

// ---- logs ----

// collect reads every arm's trainer logs every 2 s until ctx ends: a
// deleted pod's log is gone, so it is read while the pod lives.
func (r *Runner) collect(ctx context.Context) {
	for {
		r.collectOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

func (r *Runner) collectOnce(ctx context.Context) {
	for _, a := range r.cfg.Arms {
		pods, err := r.cs.CoreV1().Pods(a.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "training.kubeflow.org/job-name=" + jobName})
		if err != nil {
			continue
		}
		var lines []string
		var samples []PodSample
		now := time.Now()
		for _, p := range pods.Items {
			samples = append(samples, SampleOf(&p, "pytorch", now))
			for _, prev := range []bool{false, true} {
				if prev && !restarted(&p) {
					continue
				}
				// bounded: a partitioned node's kubelet never answers (its
				// log is read again once it is healed)
				c, cancel := context.WithTimeout(ctx, 5*time.Second)
				raw, err := r.cs.CoreV1().Pods(a.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "pytorch", Timestamps: true, Previous: prev}).DoRaw(c)
				cancel()
				if err == nil {
					lines = append(lines, strings.Split(string(raw), "\n")...)
				}
			}
		}
		r.mu.Lock()
		r.lines[a.Name] = append(r.lines[a.Name], lines...)
		r.lines[a.Name] = dedupe(r.lines[a.Name])
		r.samples[a.Name] = append(r.samples[a.Name], samples...)
		r.mu.Unlock()
	}
}

func restarted(p *corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "pytorch" && s.RestartCount > 0 {
			return true
		}
	}
	return false
}

func dedupe(ls []string) []string {
	slices.Sort(ls)
	return slices.Compact(ls)
}

// waitTraining waits until rank 0 of every arm completed step n.
func (r *Runner) waitTraining(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		r.collectOnce(ctx)
		var waiting []string
		r.mu.Lock()
		for _, a := range r.cfg.Arms {
			if NewSeries(r.lines[a.Name]).Progress(time.Now()) < n {
				waiting = append(waiting, a.Name)
			}
		}
		r.mu.Unlock()
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("arms %v not training (step %d) after %s", waiting, n, timeout)
		}
		if err := sleepUntil(ctx, time.Now().Add(2*time.Second)); err != nil {
			return err
		}
	}
}

// ---- disruptions ----

// apply starts one disruption and returns how to end it (at the next one,
// or for a crashed node after the repair time).
func (r *Runner) apply(ctx context.Context, ev Event) (Applied, heal) {
	ap := Applied{Event: ev, T: time.Now()}
	nothing := heal{}
	switch ev.Kind {
	case RankKill, RankRaise:
		ap.Target = fmt.Sprintf("rank %d of every arm", ev.Slot)
		ap.Note = r.perArm(func(a Arm) string { return r.hitRank(ctx, a, ev) })
		return ap, nothing
	case KueuePreempt:
		ap.Target = "every arm's queue"
		hold := r.cfg.Interval / 3
		ap.Note = r.perArm(func(a Arm) string {
			if err := r.create(ctx, r.highJob(a, hold)); err != nil {
				return "high job: " + err.Error()
			}
			return fmt.Sprintf("high-priority job for %s", hold)
		})
		return ap, heal{f: func() {
			for _, a := range r.cfg.Arms {
				bg := metav1.DeletePropagationBackground
				_ = r.dyn.Resource(pytorchJobs).Namespace(a.Namespace).Delete(ctx, jobName+"-high", metav1.DeleteOptions{PropagationPolicy: &bg})
			}
		}}
	}
	node, hosted, err := r.targetNode(ctx, ev.Slot)
	ap.Target = node
	if err != nil {
		ap.Note = err.Error()
		return ap, nothing
	}
	ap.Hit = hosted
	ap.Note = "arms with a pod there: " + strings.Join(hosted, ", ")
	switch ev.Kind {
	case Drain:
		go func() {
			if _, err := r.run(ctx, r.cfg.Kubectl, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=5m"); err != nil {
				r.cfg.Logf("goodput: drain %s: %v", node, err)
			}
		}()
		return ap, heal{f: func() { _, _ = r.run(context.Background(), r.cfg.Kubectl, "uncordon", node) }}
	case Crash, Partition, WarnedCrash:
		do, undo := "crash", "restore"
		if ev.Kind == Partition {
			do, undo = "partition", "heal"
		}
		if ev.Kind == WarnedCrash {
			ap.Note += r.warn(ctx, node, corev1.ConditionTrue, ev.WarnLead())
			ap.T = time.Now() // the crash, not the warning, is the disruption's time
		}
		if _, err := r.run(ctx, r.cfg.Hook, do, node); err != nil {
			ap.Note += "; hook: " + err.Error()
		}
		var due time.Time
		if ev.Kind != Partition {
			due = ap.T.Add(r.cfg.Repair)
			ap.Note += fmt.Sprintf("; repaired after %s", r.cfg.Repair)
		}
		return ap, heal{due: due, f: func() {
			if ev.Kind == WarnedCrash {
				_ = SetNodeCondition(context.Background(), r.cs, node, maintenancePlanned, corev1.ConditionFalse)
			}
			if _, err := r.run(context.Background(), r.cfg.Hook, undo, node); err != nil {
				r.cfg.Logf("goodput: %s %s: %v", undo, node, err)
			}
			r.waitReady(context.Background(), node)
		}}
	case SchedPreempt:
		cpu, err := r.urgentCPU(ctx, node)
		if err != nil {
			ap.Note += "; " + err.Error()
			return ap, nothing
		}
		p := urgentPod(urgentNS(r.cfg.Arms), node, r.cfg.Image, corev1.PullPolicy(r.cfg.PullPolicy), cpu, r.cfg.Interval/3)
		if _, err := r.cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			ap.Note += "; urgent pod: " + err.Error()
		} else {
			ap.Note += fmt.Sprintf("; urgent pod asks %dm CPU", cpu)
		}
		return ap, heal{f: func() {
			_ = r.cs.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		}}
	}
	ap.Note = "unknown kind"
	return ap, nothing
}

// perArm runs f for every arm at once and joins the notes.
func (r *Runner) perArm(f func(Arm) string) string {
	notes := make([]string, len(r.cfg.Arms))
	var wg sync.WaitGroup
	for i, a := range r.cfg.Arms {
		wg.Add(1)
		go func() { defer wg.Done(); notes[i] = a.Name + ": " + f(a) }()
	}
	wg.Wait()
	return strings.Join(notes, "; ")
}

// KillRankScript sends a signal (argv[1], a name or a number: 0 sends none)
// to the trainer of rank argv[2] in
// a container: the python3 process running the example trainer with that
// RANK in its environment (not the shell around it, not torchrun), and
// prints its PID. Python, because the image has no grep or pgrep.
const KillRankScript = `import os, signal, sys
want = b"RANK=" + sys.argv[2].encode()
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
        env = open("/proc/%s/environ" % p, "rb").read().split(b"\0")
    except OSError:
        continue
    if argv[0].endswith(b"python3") and b"/opt/trainguard/trainer/train.py" in argv and b"torch.distributed.run" not in argv and want in env:
        os.kill(int(p), int(sys.argv[1]) if sys.argv[1].isdigit() else getattr(signal, "SIG" + sys.argv[1]))
        print(p)
        sys.exit(0)
sys.exit("no rank %s trainer found" % sys.argv[2])`

// hitRank kills (SIGKILL) or makes raise (the trainer's --raise-if-exists
// file) the trainer of rank ev.Slot in arm a.
func (r *Runner) hitRank(ctx context.Context, a Arm, ev Event) string {
	pod := jobName + "-master-0"
	if ev.Slot == 1 {
		pod = jobName + "-worker-0"
	}
	args := []string{"exec", "-n", a.Namespace, pod, "-c", "pytorch", "--", "python3", "-c"}
	if ev.Kind == RankKill {
		args = append(args, KillRankScript, "KILL", fmt.Sprint(ev.Slot))
	} else {
		args = append(args, fmt.Sprintf("open(%q, 'w').close()", raiseAt))
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second) // a silent kubelet never answers an exec
	defer cancel()
	if out, err := r.run(c, r.cfg.Kubectl, args...); err != nil {
		return fmt.Sprintf("%s: not applied (%s)", pod, firstLine(out))
	}
	return pod
}

func firstLine(s string) string { return strings.SplitN(strings.TrimSpace(s), "\n", 2)[0] }

// targetNode is the node hosting pods of the most arms (then the most
// pods); among equals the slot's, in name order.
func (r *Runner) targetNode(ctx context.Context, slot int) (string, []string, error) {
	arms := map[string]map[string]bool{}
	pods := map[string]int{}
	for _, a := range r.cfg.Arms {
		list, err := r.cs.CoreV1().Pods(a.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "training.kubeflow.org/job-name=" + jobName})
		if err != nil {
			return "", nil, err
		}
		for _, p := range list.Items {
			if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			if arms[p.Spec.NodeName] == nil {
				arms[p.Spec.NodeName] = map[string]bool{}
			}
			arms[p.Spec.NodeName][a.Name] = true
			pods[p.Spec.NodeName]++
		}
	}
	if len(arms) == 0 {
		return "", nil, fmt.Errorf("no arm has a running pod")
	}
	var nodes []string
	for n := range arms {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	best := nodes[slot%len(nodes)]
	for _, n := range nodes {
		if len(arms[n]) > len(arms[best]) || len(arms[n]) == len(arms[best]) && pods[n] > pods[best] {
			best = n
		}
	}
	var hosted []string
	for _, a := range r.cfg.Arms {
		if arms[best][a.Name] {
			hosted = append(hosted, a.Name)
		}
	}
	return best, hosted, nil
}

// urgentCPU is what the urgent pod asks so that the scheduler must preempt
// every lower-priority pod on node: its unrequested CPU plus what those
// pods request, counted as the scheduler does.
func (r *Runner) urgentCPU(ctx context.Context, node string) (int64, error) {
	n, err := r.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	want := n.Status.Allocatable.Cpu().MilliValue()
	pods, err := r.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.Priority == nil || *p.Spec.Priority < 1000 {
			continue // a victim: its CPU is the urgent pod's
		}
		want -= PodCPU(&p)
	}
	return want, nil
}

// PodCPU is a pod's CPU request in millicores as the scheduler counts it:
// its containers summed, or its largest init container if larger.
func PodCPU(p *corev1.Pod) int64 {
	var sum, init int64
	for _, c := range p.Spec.Containers {
		sum += c.Resources.Requests.Cpu().MilliValue()
	}
	for _, c := range p.Spec.InitContainers {
		init = max(init, c.Resources.Requests.Cpu().MilliValue())
	}
	return max(sum, init)
}

func urgentPod(ns, node, image string, pull corev1.PullPolicy, cpu int64, hold time.Duration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "urgent", Namespace: ns},
		Spec: corev1.PodSpec{
			PriorityClassName: urgentPC,
			RestartPolicy:     corev1.RestartPolicyNever,
			NodeSelector:      map[string]string{"kubernetes.io/hostname": node},
			Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "urgent", Image: image, ImagePullPolicy: pull,
				Command:   []string{"python3", "-c", fmt.Sprintf("import time; time.sleep(%d)", int(hold.Seconds()))},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(cpu, resource.DecimalSI)}},
			}},
		},
	}
}

func (r *Runner) waitReady(ctx context.Context, node string) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		n, err := r.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		if sleepUntil(ctx, time.Now().Add(2*time.Second)) != nil {
			return
		}
	}
	r.cfg.Logf("goodput: node %s not Ready 2 min after its restore", node)
}

func (r *Runner) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, args[0], err, firstLine(out.String()))
	}
	return out.String(), nil
}

// maintenancePlanned is the node condition a warned crash announces itself
// with (one of Kubernetes' NodeLifecycleConditions, which trainguard's
// node warnings listen to by default).
const maintenancePlanned = "MaintenancePlanned"

// warn sets the node's MaintenancePlanned condition and waits lead before
// the crash; its note for the applied disruption.
func (r *Runner) warn(ctx context.Context, node string, status corev1.ConditionStatus, lead time.Duration) string {
	if err := SetNodeCondition(ctx, r.cs, node, maintenancePlanned, status); err != nil {
		return "; warning: " + err.Error()
	}
	if err := sleepUntil(ctx, time.Now().Add(lead)); err != nil {
		return "; " + err.Error()
	}
	return fmt.Sprintf("; %s=%s %s before the crash", maintenancePlanned, status, lead)
}

// SetNodeCondition writes one condition of the node's status, as a node
// agent (node-problem-detector, a GPU health agent) does: a strategic
// merge patch keyed by type, so the kubelet's own conditions stay.
func SetNodeCondition(ctx context.Context, cs kubernetes.Interface, node, typ string, status corev1.ConditionStatus) error {
	now := metav1.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeConditionType(typ), Status: status, Reason: "ChaosNodeWarning", Message: "set by trainguard's tests",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}}})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
