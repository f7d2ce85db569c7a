// Package load measures what admission costs through a real kube-apiserver:
// the same training-shaped pods and PyTorchJobs are created, in one run, in
// three namespaces: one no webhook matches, one a no-op controller-runtime
// webhook matches (registered like trainguard's: mutating + validating, same
// rules, failure policy and timeouts), and one trainguard matches (opted in).
// It prints objects/s and p50/p99 latency for each and trainguard's ratios
// to the no-op floor. Run it with `make load`; it asserts no timing.
package load

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/server"
	"github.com/trainguard/trainguard/test/controlplane"
)

// Settings, overridable from the environment (make load passes them through).
func setting(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

const (
	noopLabel     = "loadtest.trainguard.io/noop"
	patchingLabel = "loadtest.trainguard.io/patching"
)

// BenchmarkAdmissionThroughAPIServer is the harness; one iteration is one
// full three-way run (use -benchtime 1x).
func BenchmarkAdmissionThroughAPIServer(b *testing.B) {
	n, clients := setting("LOAD_N", 600), setting("LOAD_CLIENTS", 8)
	ctrl.SetLogger(logr.Discard())
	// LOAD_CHART_VALUES: space-separated --set values for trainguard's
	// webhook configurations, e.g. webhook.podMatchConditions=true.
	cp, err := controlplane.Start(controlplane.Options{ChartValues: strings.Fields(os.Getenv("LOAD_CHART_VALUES"))})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := controlplane.TrainguardOptions{}
	if os.Getenv("LOAD_RESCHEDULER") == "off" {
		// Ablation: what the rescheduler's pod informer and reconciles cost.
		r := rescheduler.DefaultOptions()
		r.Enabled = ptr(false)
		opts.Rescheduler = &r
	}
	tg, err := cp.StartTrainguard(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tg.Stop() }()
	if os.Getenv("LOAD_TG_MATCHCONDITIONS") == "off" {
		if err := dropCreateMatchConditions(ctx, cp); err != nil {
			b.Fatal(err)
		}
	}
	if err := startNoop(ctx, b, cp); err != nil {
		b.Fatal(err)
	}
	c, err := fastClient(cp)
	if err != nil {
		b.Fatal(err)
	}
	rc := rest.CopyConfig(cp.Config)
	rc.GroupVersion, rc.APIPath = &schema.GroupVersion{}, "/"
	rc.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if apiRest, err = rest.RESTClientFor(rc); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		run(ctx, b, c, i, n, clients)
	}
}

// trainguardNamespace is the annotations of trainguard's namespace: opted
// in, without a checkpoint claim, so every admitted object is also warned
// about and counted, and the namespace gets an EphemeralCheckpoints Event
// a minute (an API write the patching no-op does not make; it was one per
// object until issue 33). LOAD_CHECKPOINT_CLAIM=on names a claim, as a
// namespace that trains should (docs/annotations.md#durable-checkpoints),
// to measure admission without the warnings and Events; the patching
// no-op then returns the patch for that namespace.
func trainguardNamespace() map[string]string {
	ann := map[string]string{contract.AnnotationInject: contract.InjectEnabled}
	if os.Getenv("LOAD_CHECKPOINT_CLAIM") == "on" {
		ann[contract.AnnotationCheckpointClaim] = "load-checkpoints"
	}
	return ann
}

type setup struct {
	name   string
	labels map[string]string
	ann    map[string]string
}

func setups() []setup {
	return []setup{
		{name: "no webhook"},
		{name: "no-op webhook", labels: map[string]string{noopLabel: "true"}},
		{name: "patching no-op", labels: map[string]string{patchingLabel: "true"}},
		{name: "trainguard", ann: trainguardNamespace()},
	}
}

// run measures each kind in rounds. Each round creates n/rounds objects in
// each namespace, in a rotating order, so a burst of load from elsewhere on
// the machine (or the API server warming up) hits every setup alike.
func run(ctx context.Context, b *testing.B, c client.Client, iter, n, clients int) {
	b.Helper()
	rounds := setting("LOAD_ROUNDS", 4)
	for _, kind := range []string{"pods", "pytorchjobs"} {
		ss := setups()
		nss := make([]string, len(ss))
		for i, s := range ss {
			nss[i] = fmt.Sprintf("load-%d-%s-%s", iter, kind[:3], slug(s.name))
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nss[i], Labels: s.labels, Annotations: s.ann}}); err != nil {
				b.Fatal(err)
			}
			waitOptIn(ctx, b, c, nss[i], s)
			// Warm up connections, informers and the API server's caches.
			create(ctx, b, c, kind, nss[i], "warm", clients, max(n/10, clients))
		}
		results := map[string]*result{}
		for r := range rounds {
			for k := range ss {
				i := (k + r) % len(ss)
				stopProfile := profile(b, kind, ss[i].name, r)
				apiProfile := profileAPIServer(ctx, b, kind, ss[i].name, r)
				calls := noopCalls.Load()
				part := create(ctx, b, c, kind, nss[i], fmt.Sprintf("r%d", r), clients, n/rounds)
				part.noopCalls = noopCalls.Load() - calls
				stopProfile()
				apiProfile()
				results[ss[i].name] = results[ss[i].name].add(part)
			}
		}
		report(b, kind, n/rounds*rounds, clients, rounds, results)
		handlerTimes()
		apiserverWebhookTimes(ctx)
	}
}

// waitOptIn waits until trainguard has mirrored the opt-in label, so the
// measurement never starts in a namespace its selectors do not match yet.
func waitOptIn(ctx context.Context, b *testing.B, c client.Client, name string, s setup) {
	b.Helper()
	if s.ann == nil {
		return
	}
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(50 * time.Millisecond) {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err == nil && ns.Labels[contract.LabelInjectEnabled] == contract.InjectEnabled {
			return
		}
	}
	b.Fatalf("namespace %s never got the opt-in label", name)
}

func slug(s string) string {
	out := []rune{}
	for _, r := range s {
		if r == ' ' {
			r = '-'
		}
		out = append(out, r)
	}
	return string(out)
}

type result struct {
	wall      time.Duration
	lat       []time.Duration
	injected  int64
	noopCalls int64
}

func (r *result) add(o *result) *result {
	if r == nil {
		return o
	}
	return &result{wall: r.wall + o.wall, lat: append(r.lat, o.lat...), injected: r.injected + o.injected, noopCalls: r.noopCalls + o.noopCalls}
}

func (r *result) perSecond() float64 { return float64(len(r.lat)) / r.wall.Seconds() }

func (r *result) quantile(q float64) time.Duration {
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	return lat[int(q*float64(len(lat)-1))]
}

// create makes n objects from `clients` goroutines and measures each call.
func create(ctx context.Context, b *testing.B, c client.Client, kind, ns, prefix string, clients, n int) *result {
	b.Helper()
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var injected atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				obj := object(kind, ns, fmt.Sprintf("%s-%d", prefix, i))
				t0 := time.Now()
				err := c.Create(ctx, obj)
				lat[i] = time.Since(t0)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if _, ok := obj.GetAnnotations()[contract.AnnotationInjected]; ok {
					injected.Add(1)
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatalf("creating %s in %s: %v", kind, ns, err)
	}
	return &result{wall: wall, lat: lat, injected: injected.Load()}
}

func report(b *testing.B, kind string, n, clients, rounds int, r map[string]*result) {
	b.Helper()
	fmt.Printf("\n%d %s per namespace, %d clients, %d interleaved rounds, through kube-apiserver:\n", n, kind, clients, rounds)
	fmt.Printf("  %-14s %10s %9s %9s %9s %11s\n", "namespace", "objects/s", "p50", "p99", "injected", "no-op calls")
	for _, s := range setups() {
		x := r[s.name]
		fmt.Printf("  %-14s %10.0f %9s %9s %9d %11d\n", s.name, x.perSecond(), x.quantile(0.5).Round(10*time.Microsecond),
			x.quantile(0.99).Round(10*time.Microsecond), x.injected, x.noopCalls)
	}
	tg, noop := r["trainguard"], r["no-op webhook"]
	tput, p99 := tg.perSecond()/noop.perSecond(), float64(tg.quantile(0.99))/float64(noop.quantile(0.99))
	fmt.Printf("  trainguard / no-op: throughput %.2fx (target >= 0.90), p50 %.2fx, p99 %.2fx (target <= 1.20)\n",
		tput, float64(tg.quantile(0.5))/float64(noop.quantile(0.5)), p99)
	if pn := r["patching no-op"]; pn != nil {
		fmt.Printf("  trainguard / patching no-op (same patch, no work): throughput %.2fx, p50 %.2fx, p99 %.2fx\n",
			tg.perSecond()/pn.perSecond(), float64(tg.quantile(0.5))/float64(pn.quantile(0.5)), float64(tg.quantile(0.99))/float64(pn.quantile(0.99)))
	}
	if pn := r["patching no-op"]; pn != nil && pn.noopCalls < int64(n) {
		b.Fatalf("the patching no-op answered %d calls for %d %s: it was not in the path", pn.noopCalls, n, kind)
	}
	if noop.noopCalls < int64(n) {
		b.Fatalf("the no-op webhook answered %d calls for %d %s: it was not in the path", noop.noopCalls, n, kind)
	}
	if tg.injected != int64(n) {
		b.Fatalf("trainguard injected %d of %d %s: the comparison would be meaningless", tg.injected, n, kind)
	}
	b.ReportMetric(tput, kind+"-throughput-ratio")
	b.ReportMetric(p99, kind+"-p99-ratio")
}

// apiserverWebhookTimes prints the mean duration of each webhook call as the
// API server saw it (apiserver_admission_webhook_admission_duration_seconds,
// cumulative): transport plus handler, without the API server's own work.
func apiserverWebhookTimes(ctx context.Context) {
	if apiRest == nil {
		return
	}
	data, err := apiRest.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		fmt.Printf("  kube-apiserver metrics: %v\n", err)
		return
	}
	sums, counts := map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		for suffix, into := range map[string]map[string]float64{"_sum{": sums, "_count{": counts} {
			prefix := "apiserver_admission_webhook_admission_duration_seconds" + suffix
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			name := between(line, `name="`, `"`)
			typ := between(line, `type="`, `"`)
			fields := strings.Fields(line)
			v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
			into[typ+" "+name] += v
		}
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if counts[k] > 0 {
			fmt.Printf("  kube-apiserver saw %-52s %6.0f calls, mean %s\n", k, counts[k], time.Duration(sums[k]/counts[k]*float64(time.Second)).Round(time.Microsecond))
		}
	}
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	if j := strings.Index(s, end); j >= 0 {
		return s[:j]
	}
	return s
}

// handlerTimes prints the mean time trainguard's handlers spent per review
// so far (its own trainguard_admission_duration_seconds), to tell its work
// apart from the API server's.
func handlerTimes() {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return
	}
	for _, f := range families {
		if f.GetName() == "trainguard_webhook_connections_total" {
			fmt.Printf("  trainguard webhook server: %.0f TLS connections accepted so far\n", f.GetMetric()[0].GetCounter().GetValue())
		}
		if f.GetName() != "trainguard_admission_duration_seconds" && f.GetName() != "trainguard_webhook_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			fmt.Printf("  %-44s %-32s %6d reviews, mean %s\n", f.GetName(), m.GetLabel()[0].GetValue(), h.GetSampleCount(),
				time.Duration(h.GetSampleSum()/float64(h.GetSampleCount())*float64(time.Second)).Round(time.Microsecond))
		}
	}
}

// profile writes a CPU profile of the process (trainguard runs in it) for
// the measured phase when LOAD_PROFILE_DIR is set.
func profile(b *testing.B, kind, setupName string, round int) func() {
	dir := os.Getenv("LOAD_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("trainguard-process-%s-%s-r%d.pprof", kind, slug(setupName), round)))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

// profileAPIServer fetches a 3 s CPU profile of kube-apiserver (its
// /debug/pprof, enabled by default) from the start of the measured phase
// when LOAD_PROFILE_DIR is set; the returned func waits for it.
func profileAPIServer(ctx context.Context, b *testing.B, kind, setupName string, round int) func() {
	dir := os.Getenv("LOAD_PROFILE_DIR")
	if dir == "" || apiRest == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		data, err := apiRest.Get().AbsPath("/debug/pprof/profile").Param("seconds", "3").DoRaw(ctx)
		if err != nil {
			b.Logf("kube-apiserver profile: %v", err)
			return
		}
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("apiserver-%s-%s-r%d.pprof", kind, slug(setupName), round)), data, 0o644)
	}()
	return func() { <-done }
}

// apiRest reaches kube-apiserver's non-resource paths (pprof).
var apiRest *rest.RESTClient // harness fixture

func object(kind, ns, name string) client.Object {
	if kind == "pods" {
		return trainingPod(ns, name)
	}
	return pytorchJob(ns, name)
}

// trainingPod is about 8 KB of JSON, like the webhook benchmarks' pod.
func trainingPod(ns, name string) *corev1.Pod {
	c := corev1.Container{
		Name: "pytorch", Image: "example.com/train:1",
		Command: []string{"torchrun", "--nnodes=2", "--nproc_per_node=8", "/workspace/train.py"},
		Args:    []string{"--config", "/etc/train/config.yaml", "--epochs", "90", "--batch-size", "256"},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("128Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Gi")},
		},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10},
	}
	for i := range 90 {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("TRAIN_SETTING_%02d", i), Value: fmt.Sprintf("value-number-%02d-for-the-trainer", i)})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "trainer", "team": "vision"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			NodeSelector:  map[string]string{"accelerator": "a100"},
		},
	}
	for i := range 6 {
		v := fmt.Sprintf("data-%d", i)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/data/" + v})
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "dataset-" + v}}})
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

const jobSpec = `
apiVersion: kubeflow.org/v1
kind: PyTorchJob
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: example.com/mnist:1
    Worker:
      replicas: 4
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: example.com/mnist:1
`

func pytorchJob(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(jobSpec), &u.Object); err != nil {
		panic(err) // a constant
	}
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// fastClient is a client the harness itself never throttles.
func fastClient(cp *controlplane.ControlPlane) (client.Client, error) {
	cfg := *cp.Config
	cfg.QPS, cfg.Burst = 100000, 100000
	return client.New(&cfg, client.Options{})
}

// startNoop serves two no-op controller-runtime webhooks (admission.Webhook)
// on their own port with envtest's serving certificate, each registered like
// trainguard's: copies of trainguard's installed configurations, renamed,
// pointed at the no-op server, matching namespaces with the setup's label.
// The copies keep rules, failure policies, timeouts and reinvocation; they
// drop trainguard's matchConditions, so the no-ops are called for every
// object, as the floor was measured.
//   - "noop-": answers Allowed, the floor.
//   - "patching-": answers with the very patch trainguard computed for the
//     first object of the kind (cached), so the API server does all the work
//     a mutation causes while the webhook does none: what is left between it
//     and trainguard is trainguard's own cost.
func startNoop(ctx context.Context, b *testing.B, cp *controlplane.ControlPlane) error {
	wio := cp.Env.WebhookInstallOptions
	addr, err := controlplane.FreeAddr()
	if err != nil {
		return err
	}
	_, portStr, _ := splitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: wio.LocalServingCertDir})
	if os.Getenv("LOAD_NOOP_SERVER") == "trainguard" {
		// Ablation: the no-op behind trainguard's own server (HTTP/1.1,
		// timeouts, limiter), to separate server from handler costs.
		srv = server.NewWebhookServer(server.WebhookServerOptions{Host: "127.0.0.1", Port: port, CertDir: wio.LocalServingCertDir, Log: logr.Discard()})
	}
	allow := &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		noopCalls.Add(1)
		return admission.Allowed("")
	})}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: controlplane.ReleaseName}, m); err != nil {
		return err
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: controlplane.ReleaseName}, v); err != nil {
		return err
	}
	patching := controlplane.NewPatchingNoop(trainguardNamespace())
	var configs []client.Object
	for _, copy := range []struct {
		prefix, label string
		mutate        func(path string) http.Handler
	}{
		{"noop", noopLabel, func(string) http.Handler { return allow }},
		{"patching", patchingLabel, func(path string) http.Handler {
			return &admission.Webhook{Handler: admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
				noopCalls.Add(1)
				return patching.Answer(path, req)
			})}
		}},
	} {
		mc, vc, paths := copies(m, v, copy.prefix, copy.label, addr)
		for p, mutating := range paths {
			h := http.Handler(allow)
			if mutating {
				h = copy.mutate(strings.TrimPrefix(p, "/"+copy.prefix))
			}
			srv.Register(p, h)
		}
		configs = append(configs, mc, vc)
	}
	go func() {
		if err := srv.Start(ctx); err != nil {
			b.Logf("no-op webhook server: %v", err)
		}
	}()
	for start := time.Now(); srv.StartedChecker()(nil) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			return fmt.Errorf("no-op webhook server did not start")
		}
	}
	for _, c := range configs {
		if err := cp.Client.Create(ctx, c); err != nil {
			return err
		}
	}
	// The API server picks configurations up asynchronously; each
	// namespace's warm-up round runs before anything is measured.
	return nil
}

// copies returns trainguard's configurations renamed with prefix, matching
// namespaces labelled label=true, their URLs pointed at addr under /prefix,
// and the paths to serve (true for mutating ones).
func copies(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration,
	prefix, label, addr string) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, map[string]bool) {
	paths := map[string]bool{}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}}
	mc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-loadtest"}}
	for _, w := range m.DeepCopy().Webhooks {
		w.Name = prefix + "-" + w.Name
		p := "/" + prefix + pathOf(w.ClientConfig.URL)
		w.ClientConfig.URL, paths[p] = ptr(retarget(*w.ClientConfig.URL, addr, p)), true
		w.NamespaceSelector, w.MatchConditions = sel, nil
		mc.Webhooks = append(mc.Webhooks, w)
	}
	vc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-loadtest"}}
	for _, w := range v.DeepCopy().Webhooks {
		w.Name = prefix + "-" + w.Name
		p := "/" + prefix + pathOf(w.ClientConfig.URL)
		w.ClientConfig.URL, paths[p] = ptr(retarget(*w.ClientConfig.URL, addr, p)), false
		w.NamespaceSelector, w.MatchConditions = sel, nil
		vc.Webhooks = append(vc.Webhooks, w)
	}
	return mc, vc, paths
}

// noopCalls counts the no-op webhook's answers, so the report shows it was called.
var noopCalls atomic.Int64 // harness counter

func splitHostPort(addr string) (string, string, error) { return net.SplitHostPort(addr) }

func pathOf(u *string) string {
	parsed, err := url.Parse(*u)
	if err != nil {
		panic(err) // envtest wrote it
	}
	// envtest writes https://host:port//path; the mux serves the clean path.
	return path.Clean(parsed.Path)
}

// retarget points an envtest webhook URL at addr and path.
func retarget(u, addr, path string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		panic(err)
	}
	parsed.Host, parsed.Path = addr, path
	return parsed.String()
}

func ptr[T any](v T) *T { return &v }

// dropCreateMatchConditions is an ablation: trainguard's CREATE entries
// without their matchConditions, to weigh what evaluating them costs the
// API server (it converts the whole object for CEL) against the calls they
// spare.
func dropCreateMatchConditions(ctx context.Context, cp *controlplane.ControlPlane) error {
	creates := func(rules []admissionregistrationv1.RuleWithOperations) bool {
		for _, r := range rules {
			if slices.Contains(r.Operations, admissionregistrationv1.Create) {
				return true
			}
		}
		return false
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: controlplane.ReleaseName}, m); err != nil {
		return err
	}
	for i := range m.Webhooks {
		if creates(m.Webhooks[i].Rules) {
			m.Webhooks[i].MatchConditions = nil
		}
	}
	if err := cp.Client.Update(ctx, m); err != nil {
		return err
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: controlplane.ReleaseName}, v); err != nil {
		return err
	}
	for i := range v.Webhooks {
		if creates(v.Webhooks[i].Rules) {
			v.Webhooks[i].MatchConditions = nil
		}
	}
	return cp.Client.Update(ctx, v)
}
