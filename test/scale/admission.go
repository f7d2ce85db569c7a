package scale

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/testing/builders"
	"github.com/trainguard/trainguard/test/controlplane"
	"github.com/trainguard/trainguard/webhook"
)

// AdmissionReport is pod creation latency in bursts of 64 pods created at
// once, through trainguard and through a no-op webhook registered like
// trainguard's, interleaved in the same run: a job's pods, bare pods, and
// the split of the job's gap.
type AdmissionReport struct {
	Bursts int
	// Job is the scale target's scenario: one PyTorchJob's 64
	// pods (a Master and 63 Workers) created at once as the training
	// operator creates them, from the templates the API server stored.
	// trainguard's job webhook injected those when the job was created, so
	// its pod webhook adds only what is per pod.
	Job Comparison
	// Bare is the worst case: 64 pods of the same spec and no job (kubectl,
	// or a controller whose kind trainguard does not inject): the pod
	// webhook adds everything (~2.6 KB of a pod's 8 KB), and the API server
	// applies, validates and stores it.
	Bare Comparison
	// Split divides Job's gap into its parts.
	Split Split
	// Refused counts the creates the API server refused, per setup (their
	// latencies are left out), and FirstRefusal is the first one's error.
	Refused      map[string]int `json:",omitempty"`
	FirstRefusal string         `json:",omitempty"`
	// Reviews trainguard answered during the bursts, and its mean time per
	// review from the request's headers to its answer (body, queueing,
	// decision, encoding: trainguard_webhook_request_duration_seconds),
	// which says how much of the gap to the no-op is trainguard's own.
	Reviews     float64
	ServeMeanMs float64
	// Connections the API server opened to trainguard during the bursts
	// (each a TLS handshake; keep-alive reuses them).
	Connections float64
	// Rounds pairs each round's trainguard job burst with the no-op job
	// burst of the same round: the pooled p99 of 40 bursts is about the
	// slowest burst's, so one burst that met something else on the machine
	// decides it; the per-round ratios show whether trainguard is slower
	// burst by burst or one burst was.
	Rounds Rounds
}

// Rounds is the per-round view of the job bursts: RatioP50 and RatioP90
// are percentiles of trainguard's burst p99 over the no-op's in the same
// round; Over counts the rounds whose ratio exceeds the target; Slowest
// are trainguard's slowest job bursts, with what else happened then.
type Rounds struct {
	RatioP50, RatioP90 float64
	Over               int
	// ContentP50 is the median per-round ratio of the no-op on the pods as
	// trainguard stores them over the no-op job burst: the injected bytes'
	// share of RatioP50, no trainguard in the path.
	ContentP50 float64
	Slowest    []RoundDetail
}

// RoundDetail is one round seen from its trainguard job burst: its p99,
// the no-op job burst's and the slowest other burst's in the same round
// (all setups slow at once: the machine), trainguard's mean time per
// review during the burst, and the garbage collections and new
// connections trainguard had during it.
type RoundDetail struct {
	Round                         int
	TrainguardP99, NoopP99        float64
	SlowestOtherP99               float64
	SlowestOther                  string
	ServeMeanMs, GCs, Connections float64
}

// Comparison is one way of creating pods, through each webhook: latency
// percentiles in milliseconds, and trainguard's p99 over the no-op's.
type Comparison struct {
	TrainguardP50, TrainguardP99 float64
	NoopP50, NoopP99             float64
	P99Ratio                     float64
}

// Split runs the job's pods as trainguard's job path stores them (built
// from the templates trainguard injected) in namespaces trainguard does
// not serve, through the no-op (Content) and through a no-op that answers
// with trainguard's own patch for them, computed once by trainguard's
// handler (Patching: the API server does every bit of work trainguard's
// mutation causes, the webhook none). Their p99s over each other say what
// each part costs:
//   - ContentOverNoop, Content over Job's no-op: the injected bytes;
//   - MutationOverContent, Patching over Content: the API server's cost of
//     any mutation (it encodes the object, applies the patch, decodes and
//     defaults it, and runs the whole mutating admission chain again);
//   - TrainguardOverPatching, Job's trainguard over Patching: trainguard's
//     own reviews and informer.
//
// PatchOperations is the size of that patch: 0 when the job's templates
// carry every injection and the pods pass trainguard unchanged (then
// Patching is a second Content).
type Split struct {
	ContentP50, ContentP99                                       float64
	PatchingP50, PatchingP99                                     float64
	ContentOverNoop, MutationOverContent, TrainguardOverPatching float64
	PatchOperations                                              int
}

func compare(tg, noop []float64) Comparison {
	c := Comparison{TrainguardP50: quantile(tg, 0.5), TrainguardP99: quantile(tg, 0.99),
		NoopP50: quantile(noop, 0.5), NoopP99: quantile(noop, 0.99)}
	c.P99Ratio = c.TrainguardP99 / c.NoopP99
	return c
}

const noopLabel = "scale.trainguard.io/noop"

// The bursts' namespaces: trainguard's (opted in), the no-op's, and two
// more of the no-op's for pods that carry trainguard's injection (Split),
// the second's mutating answers being trainguard's patch.
const burstNS, noopBurstNS, noopContentNS, patchingNS = "burst-trainguard", "burst-noop", "burst-noop-content", "burst-noop-patching"

// startNoop serves an always-allow webhook with envtest's certificate and
// registers copies of trainguard's pod entries (rules, failure policy,
// timeouts) pointing at it, for namespaces labelled noopLabel.
func (e *env) startNoop(ctx context.Context) error {
	port, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	// HTTP/1.1 only, as trainguard (and any webhook hardened against HTTP/2
	// rapid reset, CVE-2023-44487): with HTTP/2 the API server would
	// multiplex a burst over one connection here and open one per
	// concurrent review to trainguard, and the ratio would measure the
	// protocol, not the webhook.
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: e.cp.Env.WebhookInstallOptions.LocalServingCertDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}})
	srv.Register("/noop", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})})
	e.patching = controlplane.NewPatchingNoop(map[string]string{contract.AnnotationInject: contract.InjectEnabled})
	srv.Register("/noop-mutate", &admission.Webhook{Handler: admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
		if req.Namespace != patchingNS {
			return admission.Allowed("")
		}
		return e.patching.Answer(webhook.PathMutatePod, req)
	})})
	go func() { _ = srv.Start(ctx) }()
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) { return srv.StartedChecker()(&http.Request{}) == nil, nil }); err != nil {
		return fmt.Errorf("no-op webhook server: %w", err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/noop", port)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{noopLabel: "true"}}
	pods := func(rules []admissionregistrationv1.RuleWithOperations) bool {
		for _, r := range rules {
			if slices.Contains(r.Resources, "pods") {
				return true
			}
		}
		return false
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "noop-scale"}}
	murl := url + "-mutate"
	for _, w := range e.cp.Mutating.DeepCopy().Webhooks {
		if pods(w.Rules) {
			w.Name, w.ClientConfig.URL, w.NamespaceSelector, w.MatchConditions = "noop-"+w.Name, &murl, sel, nil
			m.Webhooks = append(m.Webhooks, w)
		}
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "noop-scale"}}
	for _, w := range e.cp.Validating.DeepCopy().Webhooks {
		if pods(w.Rules) {
			w.Name, w.ClientConfig.URL, w.NamespaceSelector, w.MatchConditions = "noop-"+w.Name, &url, sel, nil
			v.Webhooks = append(v.Webhooks, w)
		}
	}
	if err := e.c.Create(ctx, m); err != nil {
		return err
	}
	return e.c.Create(ctx, v)
}

func (e *env) admission(ctx context.Context) (*AdmissionReport, error) {
	if err := e.startNoop(ctx); err != nil {
		return nil, err
	}
	tgNS, noopNS := burstNS, noopBurstNS
	if err := e.c.Create(ctx, optedIn(tgNS)); err != nil {
		return nil, err
	}
	for _, ns := range []string{noopNS, noopContentNS, patchingNS} {
		if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{noopLabel: "true"}}}); err != nil {
			return nil, err
		}
	}
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		ns := &corev1.Namespace{}
		err := e.c.Get(ctx, client.ObjectKey{Name: tgNS}, ns)
		return err == nil && len(ns.Labels) > 1, nil
	}); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // the API server picks the no-op's configuration up
	// Every round, one 64-pod burst each, in a new random order (a fixed
	// seed): a burst pays for what the one before left behind (the API
	// server's and the informers' work), so none may always follow the
	// same one. Half a second apart, as jobs arrive, not back to back.
	template, err := e.createJob(ctx, tgNS, "template")
	if err != nil {
		return nil, err
	}
	setups := []struct {
		key   string
		ns    string
		burst func(ctx context.Context, ns string, n int) (burstResult, error)
	}{
		{jobTrainguard, tgNS, e.jobBurst(nil)}, {jobNoop, noopNS, e.jobBurst(nil)},
		{jobContent, noopContentNS, e.jobBurst(template)}, {"content/patching", patchingNS, e.jobBurst(template)},
		{"bare/trainguard", tgNS, e.burst}, {"bare/noop", noopNS, e.burst},
	}
	lat, refused, firstRefusal := map[string][]float64{}, map[string]int{}, ""
	order := rand.New(rand.NewPCG(34, 64))
	var before series
	var rounds []round
	for b := -1; b < e.o.Bursts; b++ { // burst -1 warms every path up
		if b == 0 {
			if before, err = e.scrape(ctx); err != nil {
				return nil, err
			}
		}
		rd := round{p99: map[string]float64{}}
		for _, i := range order.Perm(len(setups)) {
			s := setups[i]
			time.Sleep(500 * time.Millisecond)
			var s0 series
			if s.key == jobTrainguard {
				if s0, err = e.scrape(ctx); err != nil {
					return nil, err
				}
			}
			res, err := s.burst(ctx, s.ns, b+1)
			if err != nil {
				return nil, fmt.Errorf("admission burst %s: %w", s.key, err)
			}
			rd.p99[s.key] = quantile(res.lat, 0.99)
			if s.key == jobTrainguard {
				s1, err := e.scrape(ctx)
				if err != nil {
					return nil, err
				}
				rd.during = served(s0, s1).RoundDetail
			}
			if b >= 0 {
				lat[s.key] = append(lat[s.key], res.lat...)
				if len(res.refused) > 0 {
					refused[s.key] += len(res.refused)
					if firstRefusal == "" {
						firstRefusal = res.refused[0].Error()
					}
				}
			}
		}
		if b >= 0 {
			rounds = append(rounds, rd)
		}
	}
	r := &AdmissionReport{Bursts: e.o.Bursts, Refused: refused, FirstRefusal: firstRefusal,
		Job: compare(lat[jobTrainguard], lat[jobNoop]), Rounds: pairRounds(rounds, 3), Bare: compare(lat["bare/trainguard"], lat["bare/noop"]),
		Split: Split{ContentP50: quantile(lat[jobContent], 0.5), ContentP99: quantile(lat[jobContent], 0.99),
			PatchingP50: quantile(lat["content/patching"], 0.5), PatchingP99: quantile(lat["content/patching"], 0.99)}}
	sp := &r.Split
	sp.ContentOverNoop, sp.MutationOverContent = sp.ContentP99/r.Job.NoopP99, sp.PatchingP99/sp.ContentP99
	sp.TrainguardOverPatching = r.Job.TrainguardP99 / sp.PatchingP99
	if sp.PatchOperations, err = e.patching.Operations(webhook.PathMutatePod); err != nil {
		return nil, err
	}
	after, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	whole := served(before, after)
	r.Reviews, r.ServeMeanMs, r.Connections = whole.reviews, whole.ServeMeanMs, whole.Connections
	for _, w := range []struct {
		what string
		c    Comparison
	}{{"a PyTorchJob's 64 pods created at once from its templates, as the training operator does", r.Job},
		{"64 bare pods created at once, no job (the pod webhook injects everything)", r.Bare}} {
		fmt.Fprintf(e.out, "  admission, %d bursts of %s: trainguard p50 %.1f ms p99 %.1f ms; no-op webhook p50 %.1f ms p99 %.1f ms; p99 ratio %.2fx\n",
			r.Bursts, w.what, w.c.TrainguardP50, w.c.TrainguardP99, w.c.NoopP50, w.c.NoopP99, w.c.P99Ratio)
	}
	fmt.Fprintf(e.out, "  the job's pods as trainguard stores them, through the no-op: p50 %.1f ms p99 %.1f ms; through a no-op answering trainguard's patch for them: p50 %.1f ms p99 %.1f ms\n",
		sp.ContentP50, sp.ContentP99, sp.PatchingP50, sp.PatchingP99)
	mutation := "the API server's work for a mutation"
	if sp.PatchOperations == 0 {
		// Nothing to answer: the patching setup is a second content one,
		// and the two side by side show the noise between equal setups.
		fmt.Fprintf(e.out, "  trainguard's patch for each of the job's pods: none (the templates carry every injection: the API server has nothing to apply and no second mutating pass to run)\n")
		mutation = "a second no-op setup (no patch to answer), i.e. the noise"
	} else {
		fmt.Fprintf(e.out, "  trainguard's patch for each of the job's pods: %d operations\n", sp.PatchOperations)
	}
	fmt.Fprintf(e.out, "  so, at p50 and p99: the injected bytes %.2fx and %.2fx the no-op; %s %.2fx and %.2fx; trainguard's own reviews and informer %.2fx and %.2fx\n",
		sp.ContentP50/r.Job.NoopP50, sp.ContentOverNoop, mutation, sp.PatchingP50/sp.ContentP50, sp.MutationOverContent,
		r.Job.TrainguardP50/sp.PatchingP50, sp.TrainguardOverPatching)
	if len(r.Refused) > 0 {
		fmt.Fprintf(e.out, "  creates refused by the API server, per setup: %v; the first: %s\n", r.Refused, r.FirstRefusal)
	}
	fmt.Fprintf(e.out, "  admission target (a job's pods): p99 ratio <= %.1f, measured %.2fx\n", admissionTarget, r.Job.P99Ratio)
	e.printRounds(&r.Rounds)
	fmt.Fprintf(e.out, "  trainguard answered %.0f reviews in those bursts (%.1f per pod), %.1f ms each on average from headers to answer, on %.0f new connections\n",
		r.Reviews, r.Reviews/float64(2*64*r.Bursts), r.ServeMeanMs, r.Connections)
	// Unscheduled, the burst pods cost the rescheduler nothing; removing
	// them is tidiness, and an API server too busy to do it fails nothing.
	for _, ns := range []string{tgNS, noopNS, noopContentNS, patchingNS} {
		jobs := &unstructured.Unstructured{}
		jobs.SetGroupVersionKind(kubeflowv1.GroupVersion.WithKind("PyTorchJob"))
		for _, obj := range []client.Object{&corev1.Pod{}, jobs} {
			if err := e.c.DeleteAllOf(ctx, obj, client.InNamespace(ns)); err != nil {
				fmt.Fprintf(e.out, "  (the burst objects of %s stay: %v)\n", ns, err)
			}
		}
	}
	return r, nil
}

// The job setups the target compares.
const jobTrainguard, jobNoop, jobContent = "job/trainguard", "job/noop", "content/noop"

// round is one round of bursts: each setup's p99, and trainguard's
// figures during its job burst.
type round struct {
	p99    map[string]float64
	during RoundDetail
}

// servedFigures is what trainguard's metrics say about the time between
// two scrapes: reviews answered, its mean time per review, garbage
// collections and new connections (in RoundDetail's fields).
type servedFigures struct {
	reviews float64
	RoundDetail
}

func served(s0, s1 series) servedFigures {
	const duration = "trainguard_webhook_request_duration_seconds"
	f := servedFigures{reviews: s1.sum(duration+"_count") - s0.sum(duration+"_count")}
	f.GCs = s1.sum("go_gc_duration_seconds_count") - s0.sum("go_gc_duration_seconds_count")
	f.Connections = s1.sum("trainguard_webhook_connections_total") - s0.sum("trainguard_webhook_connections_total")
	if f.reviews > 0 {
		f.ServeMeanMs = 1000 * (s1.sum(duration+"_sum") - s0.sum(duration+"_sum")) / f.reviews
	}
	return f
}

// pairRounds pairs each round's trainguard job burst with the no-op's and
// keeps the slowest trainguard bursts' details.
func pairRounds(rounds []round, slowest int) Rounds {
	var out Rounds
	ratios, content := make([]float64, 0, len(rounds)), make([]float64, 0, len(rounds))
	details := make([]RoundDetail, 0, len(rounds))
	for i, rd := range rounds {
		d := rd.during
		d.Round, d.TrainguardP99, d.NoopP99 = i, rd.p99[jobTrainguard], rd.p99[jobNoop]
		for key, p := range rd.p99 {
			if key != jobTrainguard && p > d.SlowestOtherP99 {
				d.SlowestOther, d.SlowestOtherP99 = key, p
			}
		}
		ratio := d.TrainguardP99 / d.NoopP99
		if ratio > admissionTarget {
			out.Over++
		}
		ratios = append(ratios, ratio)
		if c, ok := rd.p99[jobContent]; ok {
			content = append(content, c/d.NoopP99)
		}
		details = append(details, d)
	}
	out.RatioP50, out.RatioP90, out.ContentP50 = quantile(ratios, 0.5), quantile(ratios, 0.9), quantile(content, 0.5)
	slices.SortFunc(details, func(a, b RoundDetail) int { return cmp.Compare(b.TrainguardP99, a.TrainguardP99) })
	out.Slowest = details[:min(slowest, len(details))]
	return out
}

// admissionTarget is the scale target (docs/scale.md): a job's pods' p99
// within 1.3x the no-op's.
const admissionTarget = 1.3

func (e *env) printRounds(r *Rounds) {
	fmt.Fprintf(e.out, "  round by round (each trainguard job burst over the no-op job burst of its round, p99): median %.2fx, 90th percentile %.2fx, %d of %d rounds over %.1fx; "+
		"the no-op on trainguard's stored pods over the same no-op burst, median %.2fx (the injected bytes, no trainguard in the path)\n",
		r.RatioP50, r.RatioP90, r.Over, e.o.Bursts, admissionTarget, r.ContentP50)
	for _, d := range r.Slowest {
		fmt.Fprintf(e.out, "    round %d: trainguard %.0f ms, no-op %.0f ms, slowest other %s %.0f ms; trainguard %.1f ms per review, %.0f GCs, %.0f new connections during its burst\n",
			d.Round, d.TrainguardP99, d.NoopP99, d.SlowestOther, d.SlowestOtherP99, d.ServeMeanMs, d.GCs, d.Connections)
	}
}

// burst creates 64 bare pods of the training pods' spec at once,
// unscheduled, and returns each create's latency in milliseconds.
func (e *env) burst(ctx context.Context, ns string, n int) (burstResult, error) {
	pods := make([]*corev1.Pod, 64)
	for i := range pods {
		pods[i] = builders.MakePod(ns, fmt.Sprintf("burst-%d-%d", n, i)).WithLabel(kubeflowv1.LabelJobName, fmt.Sprintf("burst-%d", n)).
			WithRestartPolicy(corev1.RestartPolicyNever).Realistic().Obj()
	}
	return e.createAll(ctx, pods)
}

// jobBurst is a burst that creates one PyTorchJob (a Master and 63
// Workers, the benchmarks' realistic pod spec) in ns, then its 64 pods at
// once, unscheduled, as the training operator creates them from from's
// templates (nil: the job's own, as the API server stored them), and
// returns each pod create's latency in milliseconds. The job's create is
// not timed: a job's pods are what arrive together.
func (e *env) jobBurst(from *unstructured.Unstructured) func(ctx context.Context, ns string, n int) (burstResult, error) {
	return func(ctx context.Context, ns string, n int) (burstResult, error) {
		job, err := e.createJob(ctx, ns, fmt.Sprintf("job-%d", n))
		if err != nil {
			return burstResult{}, err
		}
		src := from
		if src == nil {
			src = job
		}
		pods, err := operatorPods(job, src)
		if err != nil {
			return burstResult{}, err
		}
		return e.createAll(ctx, pods)
	}
}

// createJob creates the bursts' PyTorchJob in ns. Only trainguard's
// namespace is opted in: its templates must come back injected, the
// no-op's as written, or the setups would not compare what they say.
func (e *env) createJob(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	job := &unstructured.Unstructured{}
	if err := job.UnmarshalJSON(builders.MakeKubeflowJob(ns, name).WithWorker(63).Realistic().JSON()); err != nil {
		return nil, err
	}
	if err := e.c.Create(ctx, job); err != nil {
		return nil, fmt.Errorf("burst job in %s: %w", ns, err)
	}
	for _, rt := range []string{kubeflowv1.ReplicaMaster, kubeflowv1.ReplicaWorker} {
		tmpl, err := replicaTemplate(job, rt)
		if err != nil {
			return nil, err
		}
		if got, want := tmpl.Labels[contract.LabelManaged] == "true", ns == burstNS; got != want {
			return nil, fmt.Errorf("job %s/%s: %s template injected %v, want %v", ns, name, rt, got, want)
		}
	}
	return job, nil
}

// operatorPods are job's pods built from from's templates as the training
// operator builds them (builders.KubeflowOperatorPods).
func operatorPods(job, from *unstructured.Unstructured) ([]*corev1.Pod, error) {
	var typed [2]kubeflowv1.PyTorchJob
	for i, u := range []*unstructured.Unstructured{job, from} {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &typed[i]); err != nil {
			return nil, fmt.Errorf("job %s: %w", u.GetName(), err)
		}
	}
	return builders.KubeflowOperatorPods(&typed[0], &typed[1]), nil
}

// burstResult is one burst: each create's latency in milliseconds, and
// the creates refused (the API server's error).
type burstResult struct {
	lat     []float64
	refused []error
}

// createAll creates the pods at once. A refused create is a figure, not
// the end of the run (an operator would retry it); a burst with more than
// a tenth refused is.
func (e *env) createAll(ctx context.Context, pods []*corev1.Pod) (burstResult, error) {
	out := make([]float64, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() {
			t := time.Now()
			errs[i] = e.c.Create(ctx, p)
			out[i] = float64(time.Since(t).Microseconds()) / 1000
		})
	}
	wg.Wait()
	var r burstResult
	for i, err := range errs {
		if err != nil {
			r.refused = append(r.refused, fmt.Errorf("pod %s/%s: %w", pods[i].Namespace, pods[i].Name, err))
			continue
		}
		r.lat = append(r.lat, out[i])
	}
	if len(r.refused) > len(pods)/10 {
		return r, fmt.Errorf("%d of %d burst pods refused, the first: %w", len(r.refused), len(pods), r.refused[0])
	}
	return r, nil
}
