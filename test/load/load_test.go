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
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/test/controlplane"
)

// Settings, overridable from the environment (make load passes them through).
func setting(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

const noopLabel = "loadtest.trainguard.io/noop"

// BenchmarkAdmissionThroughAPIServer is the harness; one iteration is one
// full three-way run (use -benchtime 1x).
func BenchmarkAdmissionThroughAPIServer(b *testing.B) {
	n, clients := setting("LOAD_N", 600), setting("LOAD_CLIENTS", 8)
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tg, err := cp.StartTrainguard(ctx, controlplane.TrainguardOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tg.Stop() }()
	if err := startNoop(ctx, b, cp); err != nil {
		b.Fatal(err)
	}
	c, err := fastClient(cp)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		run(ctx, b, c, i, n, clients)
	}
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
		{name: "trainguard", ann: map[string]string{policy.AnnotationInject: policy.InjectEnabled}},
	}
}

func run(ctx context.Context, b *testing.B, c client.Client, iter, n, clients int) {
	b.Helper()
	for _, kind := range []string{"pods", "pytorchjobs"} {
		results := map[string]result{}
		for _, s := range setups() {
			ns := fmt.Sprintf("load-%d-%s-%s", iter, kind[:3], slug(s.name))
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: s.labels, Annotations: s.ann}}); err != nil {
				b.Fatal(err)
			}
			waitOptIn(ctx, b, c, ns, s)
			// Warm up connections, informers and the API server's caches.
			create(ctx, b, c, kind, ns, "warm", clients, n/10)
			stopProfile := profile(b, kind, s.name)
			calls := noopCalls.Load()
			r := create(ctx, b, c, kind, ns, "obj", clients, n)
			r.noopCalls = noopCalls.Load() - calls
			results[s.name] = r
			stopProfile()
		}
		report(b, kind, n, clients, results)
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
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err == nil && ns.Labels[policy.LabelInjectEnabled] == policy.InjectEnabled {
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
	perSecond float64
	p50, p99  time.Duration
	injected  int64
	noopCalls int64
}

// create makes n objects from `clients` goroutines and measures each call.
func create(ctx context.Context, b *testing.B, c client.Client, kind, ns, prefix string, clients, n int) result {
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
				if _, ok := obj.GetAnnotations()[policy.AnnotationInjected]; ok {
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
	slices.Sort(lat)
	return result{perSecond: float64(n) / wall.Seconds(), p50: lat[n/2], p99: lat[n*99/100], injected: injected.Load()}
}

func report(b *testing.B, kind string, n, clients int, r map[string]result) {
	b.Helper()
	fmt.Printf("\n%d %s, %d clients, through kube-apiserver:\n", n, kind, clients)
	fmt.Printf("  %-14s %10s %9s %9s %9s %10s\n", "namespace", "objects/s", "p50", "p99", "injected", "no-op calls")
	for _, s := range setups() {
		x := r[s.name]
		fmt.Printf("  %-14s %10.0f %9s %9s %9d %10d\n", s.name, x.perSecond, x.p50.Round(10*time.Microsecond), x.p99.Round(10*time.Microsecond), x.injected, x.noopCalls)
	}
	if r["no-op webhook"].noopCalls < int64(n) {
		b.Fatalf("the no-op webhook answered %d calls for %d %s: it was not in the path", r["no-op webhook"].noopCalls, n, kind)
	}
	tg, noop := r["trainguard"], r["no-op webhook"]
	fmt.Printf("  trainguard / no-op: throughput %.2fx (target >= 0.90), p99 %.2fx (target <= 1.20)\n",
		tg.perSecond/noop.perSecond, float64(tg.p99)/float64(noop.p99))
	if tg.injected != int64(n) {
		b.Fatalf("trainguard injected %d of %d %s: the comparison would be meaningless", tg.injected, n, kind)
	}
	b.ReportMetric(tg.perSecond/noop.perSecond, kind+"-throughput-ratio")
}

// profile writes a CPU profile of the process (trainguard runs in it) for
// the measured phase when LOAD_PROFILE_DIR is set.
func profile(b *testing.B, kind, setupName string) func() {
	dir := os.Getenv("LOAD_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%s-%s.pprof", kind, slug(setupName))))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

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

// startNoop serves a no-op controller-runtime webhook (admission.Webhook,
// answering Allowed) on its own port with envtest's serving certificate, and
// registers it like trainguard's: copies of trainguard's installed
// configurations, renamed, pointed at the no-op server, matching namespaces
// labelled loadtest.trainguard.io/noop=true. The copies keep rules, failure
// policies, timeouts and reinvocation; they drop trainguard's
// matchConditions, so the no-op is called for every pod, as the issue's
// floor was measured.
func startNoop(ctx context.Context, b *testing.B, cp *controlplane.ControlPlane) error {
	wio := cp.Env.WebhookInstallOptions
	addr, err := controlplane.FreeAddr()
	if err != nil {
		return err
	}
	_, portStr, _ := splitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: wio.LocalServingCertDir})
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
	paths := map[string]bool{}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{noopLabel: "true"}}
	mNoop := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "noop-loadtest"}}
	for _, w := range m.Webhooks {
		w.Name = "noop-" + w.Name
		w.ClientConfig.URL, paths[pathOf(w.ClientConfig.URL)] = ptr(retarget(*w.ClientConfig.URL, addr)), true
		w.NamespaceSelector, w.MatchConditions = sel, nil
		mNoop.Webhooks = append(mNoop.Webhooks, w)
	}
	vNoop := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "noop-loadtest"}}
	for _, w := range v.Webhooks {
		w.Name = "noop-" + w.Name
		w.ClientConfig.URL, paths[pathOf(w.ClientConfig.URL)] = ptr(retarget(*w.ClientConfig.URL, addr)), true
		w.NamespaceSelector, w.MatchConditions = sel, nil
		vNoop.Webhooks = append(vNoop.Webhooks, w)
	}
	for p := range paths {
		srv.Register(p, allow)
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
	if err := cp.Client.Create(ctx, mNoop); err != nil {
		return err
	}
	if err := cp.Client.Create(ctx, vNoop); err != nil {
		return err
	}
	// The API server picks configurations up asynchronously; each
	// namespace's warm-up round runs before anything is measured.
	return nil
}

// noopCalls counts the no-op webhook's answers, so the report shows it was called.
var noopCalls atomic.Int64 //nolint:gochecknoglobals // harness counter

func splitHostPort(addr string) (string, string, error) { return net.SplitHostPort(addr) }

func pathOf(u *string) string {
	parsed, err := url.Parse(*u)
	if err != nil {
		panic(err) // envtest wrote it
	}
	// envtest writes https://host:port//path; the mux serves the clean path.
	return path.Clean(parsed.Path)
}

// retarget points an envtest webhook URL at addr, keeping the path.
func retarget(u, addr string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		panic(err)
	}
	parsed.Host = addr
	return parsed.String()
}

func ptr[T any](v T) *T { return &v }
