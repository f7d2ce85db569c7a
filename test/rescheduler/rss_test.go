//go:build rssbench

package rescheduler

// The memory benchmark of issue 10: the rescheduler's manager against the
// real API server holding 10,000 managed pods on 1,000 nodes, 1,000
// bad-node records in trainguard's namespace and, in a tenant namespace,
// ConfigMaps labelled trainguard.io/bad-nodes=true (the tenant-fillable
// memory of the old cache). It prints the manager's RSS and heap side by
// side with a baseline manager built the same way but with the old cache
// (no transforms, labelled ConfigMaps of every namespace). Run it with
// `make bench-rescheduler-rss` (several minutes; not part of `make test`).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/test/controlplane"
)

const (
	rssEnv        = "TRAINGUARD_RSS_MANAGER"
	rssReady      = "TRAINGUARD-RSS-READY"
	rssNodes      = 1000
	rssPods       = 10000
	rssRecords    = 1000
	rssTenantCMs  = 100
	rssTenantSize = 500 << 10
	rssTargetMiB  = 150
	// rssSettle lets the manager reconcile every pod once before it is measured.
	rssSettle = 15 * time.Second
)

func init() { childModes = append(childModes, rssChild) } // registers the child mode under the build tag.

type rssConfig struct {
	managerConfig
	Baseline    bool
	HeapProfile string
}

// rssChild is the measured manager: controller-runtime's manager with the
// rescheduler and the webhook's readers (namespaces, records), built with
// trainguard's cache options, or with the old ones for the baseline.
func rssChild() (int, bool) {
	path := os.Getenv(rssEnv)
	if path == "" {
		return 0, false
	}
	var cfg rssConfig
	raw, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rss manager config:", err)
		return 2, true
	}
	if err := runRSSChild(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "rss manager:", err)
		return 1, true
	}
	return 0, true
}

func runRSSChild(cfg rssConfig) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	restCfg := &rest.Config{Host: cfg.Host, BearerToken: cfg.BearerToken, QPS: 100, Burst: 200,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData, CertData: cfg.CertData, KeyData: cfg.KeyData}}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	cacheOpts := cache.Options{ByObject: resched.CacheByObject(controlplane.Namespace, jobs.Builtin()), DefaultTransform: cache.TransformStripManagedFields()}
	if cfg.Baseline {
		cacheOpts = cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:       {Label: labels.SelectorFromSet(labels.Set{contract.LabelManaged: "true"})},
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{contract.LabelBadNodes: "true"})},
		}}
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{Scheme: scheme, Cache: cacheOpts,
		Metrics: metricsserver.Options{BindAddress: "0"}, Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		return err
	}
	settings := configv1alpha1.Default()
	settings.Rescheduler = cfg.Rescheduler
	if err := resched.Setup(mgr, settings, controlplane.Namespace); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Namespace{}} { // what the webhook reads
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return err
		}
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	time.Sleep(rssSettle)
	goruntime.GC()
	if cfg.HeapProfile != "" {
		if f, err := os.Create(cfg.HeapProfile); err == nil {
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
		}
	}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	fmt.Printf("%s heapInuse=%d\n", rssReady, ms.HeapInuse)
	return <-done
}

// rssSample is one manager's figures.
type rssSample struct{ rss, hwm, heap int64 }

func measureRSS(t *testing.T, baseline bool) rssSample {
	t.Helper()
	wio := env.cp.Env.WebhookInstallOptions
	cfg := rssConfig{Baseline: baseline, HeapProfile: filepath.Join(env.dir, fmt.Sprintf("heap-%v.pprof", baseline)), managerConfig: managerConfig{
		managerOptions: managerOptions{Rescheduler: defaultOptions()},
		Host:           env.cp.Config.Host, CAData: env.cp.Config.CAData, CertData: env.cp.Config.CertData,
		KeyData: env.cp.Config.KeyData, BearerToken: env.cp.Config.BearerToken, WebhookHost: wio.LocalServingHost,
	}}
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(env.dir, fmt.Sprintf("rss-%v.json", baseline))
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rssEnv+"="+path)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var s rssSample
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, rssReady) {
			s.heap, err = strconv.ParseInt(strings.TrimPrefix(line, rssReady+" heapInuse="), 10, 64)
			require.NoError(t, err)
			break
		}
	}
	require.NotZero(t, s.heap, "the manager reported its heap")
	s.rss, s.hwm = procStatusKiB(t, cmd.Process.Pid, "VmRSS")*1024, procStatusKiB(t, cmd.Process.Pid, "VmHWM")*1024
	return s
}

func procStatusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	require.FailNow(t, "no "+field+" in /proc status")
	return 0
}

// parallel runs do(i) for i in [0, n) on 32 workers.
func parallel(t *testing.T, n int, do func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// trainingPod is a realistic worker: env, args, resources, volumes, and
// the injection the webhook adds on top.
func trainingPod(ns string, i int) *corev1.Pod {
	var envs []corev1.EnvVar
	for k := range 20 {
		envs = append(envs, corev1.EnvVar{Name: fmt.Sprintf("TRAINING_SETTING_%02d", k), Value: strings.Repeat("v", 40)})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("worker-%05d", i), Labels: map[string]string{
			"app.kubernetes.io/name": "llm-pretrain", "team": "research", "run": fmt.Sprintf("run-%d", i/8)}},
		Spec: corev1.PodSpec{
			NodeName:      fmt.Sprintf("%s-n%04d", ns, i%rssNodes),
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "pytorch", Image: "registry.example.com/research/llm-pretrain:2026.11.3",
				Command: []string{"torchrun"}, Args: []string{"--nnodes=8", "--nproc-per-node=8", "train.py", "--config=/etc/train/config.yaml"},
				Env: envs,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "shm", MountPath: "/dev/shm"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "datasets"}}},
				{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			},
		},
	}
}

func populate(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	ns := namespace(t)
	tenant := plainNamespace(t)
	start := time.Now()
	parallel(t, rssNodes, func(i int) error {
		name := fmt.Sprintf("%s-n%04d", ns, i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{hostnameLabel: name, corev1.LabelTopologyZone: ns}}}
		if err := env.c.Create(ctx, node); err != nil {
			return err
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		node.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example.com/research/llm-pretrain:2026.11.3"}, SizeBytes: 20 << 30}}
		return env.c.Status().Update(ctx, node)
	})
	parallel(t, rssPods, func(i int) error {
		p := trainingPod(ns, i)
		if err := env.c.Create(ctx, p); err != nil {
			return err
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.0.1", HostIP: "10.0.0.1", StartTime: ptr.To(metav1.Now()),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "pytorch", Image: p.Spec.Containers[0].Image, ImageID: "sha256:" + strings.Repeat("a", 64),
				ContainerID: "containerd://" + strings.Repeat("b", 64), Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
		return env.c.Status().Update(ctx, p)
	})
	parallel(t, rssRecords, func(i int) error {
		key := jobs.Key{Namespace: ns, APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: fmt.Sprintf("job-%04d", i)}
		nodes := map[string]string{}
		for k := range 16 {
			nodes[fmt.Sprintf("%s-n%04d", ns, (i+k)%rssNodes)] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		}
		raw, _ := json.Marshal(nodes)
		return env.c.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace, Name: resched.RecordName(key), Labels: map[string]string{contract.LabelBadNodes: "true"}},
			Data:       map[string]string{"nodes": string(raw), "reschedules": "1", "job": key.String(), "jobAPIVersion": key.APIVersion},
		})
	})
	parallel(t, rssTenantCMs, func(i int) error {
		return env.c.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: fmt.Sprintf("filler-%03d", i), Labels: map[string]string{contract.LabelBadNodes: "true"}},
			Data:       map[string]string{"pendingPod": strings.Repeat("x", rssTenantSize)},
		})
	})
	t.Logf("created %d nodes, %d managed pods (with status), %d records, %d tenant ConfigMaps of %d KiB in %s",
		rssNodes, rssPods, rssRecords, rssTenantCMs, rssTenantSize>>10, time.Since(start).Round(time.Second))
}

func TestManagerRSS(t *testing.T) {
	populate(t)          // through the shared manager's webhook, as in a cluster
	env.replaceShared(t) // then nothing else reconciles while we measure
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	now := measureRSS(t, false)
	base := measureRSS(t, true)
	t.Logf("manager memory, %d managed pods on %d nodes, %d records, %d tenant ConfigMaps x %d KiB (after a %s settle and a GC):",
		rssPods, rssNodes, rssRecords, rssTenantCMs, rssTenantSize>>10, rssSettle)
	t.Logf("  %-58s %9s %9s %10s", "cache", "VmRSS", "VmHWM", "HeapInuse")
	t.Logf("  %-58s %7.1f MiB %7.1f MiB %8.1f MiB", "trainguard (own-namespace ConfigMaps, stripped pods/nodes)", mib(now.rss), mib(now.hwm), mib(now.heap))
	t.Logf("  %-58s %7.1f MiB %7.1f MiB %8.1f MiB", "baseline (no transform, labelled ConfigMaps everywhere)", mib(base.rss), mib(base.hwm), mib(base.heap))
	require.LessOrEqual(t, mib(now.rss), float64(rssTargetMiB), "the target is <= %d MiB", rssTargetMiB)
}
