//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Fixed by hack/cluster/lib.sh.
const (
	clusterDir   = "/tmp/trainguard-cluster"
	releaseNS    = "trainguard-system"
	releaseName  = "trainguard"
	claimName    = "tg-checkpoints"
	trainerImage = "localhost/pytorch:e2e"
	infraLabel   = "e2e.trainguard.io/infra"
	laneLabel    = "e2e.trainguard.io/lane"
	// The API server's PodNodeSelector admission plugin (hack/cluster/up.sh)
	// adds a namespace's selector to every pod created in it.
	nsNodeSelector = "scheduler.alpha.kubernetes.io/node-selector"
)

var pytorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// env is the harness: clients, paths and the summary table.
type env struct {
	cs   kubernetes.Interface
	dyn  dynamic.Interface
	root string // repository root
	kcfg string

	mu      sync.Mutex
	rows    []row
	times   []timing
	started time.Time

	// set by setupLanes, read-only after
	training     []string            // every training node (not infra), by index
	laneNodes    map[string][]string // lane → its nodes
	scenarioLane map[string]string   // scenario (top-level subtest) → lane

	resumedStepNote string // node crash: the step training resumed at
}

// timing is one scenario's wall time, for the summary table.
type timing struct {
	scenario, lane string
	took           time.Duration
}

// row is one line of the summary table.
type row struct {
	scenario string
	pass     bool
	figures  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	kcfg := os.Getenv("KUBECONFIG")
	if kcfg == "" {
		kcfg = clusterDir + "/kubeconfig"
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kcfg)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v (start the cluster with `make cluster`)", kcfg, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		cs: kubernetes.NewForConfigOrDie(cfg), dyn: dynamic.NewForConfigOrDie(cfg),
		root: root, kcfg: kcfg, started: time.Now(),
	}
}

func (e *env) record(scenario string, pass bool, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rows = append(e.rows, row{scenario, pass, fmt.Sprintf(format, args...)})
}

func (e *env) timed(scenario string, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.times = append(e.times, timing{scenario, e.scenarioLane[scenario], d})
}

func (e *env) table() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n| scenario | result | figures |\n|---|---|---|\n")
	for _, r := range e.rows {
		res := "PASS"
		if !r.pass {
			res = "FAIL"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.scenario, res, r.figures)
	}
	fmt.Fprintf(&b, "\n| scenario run | lane | time |\n|---|---|---|\n")
	for _, x := range e.times {
		l := x.lane
		if l == "" {
			l = "alone"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", x.scenario, l, x.took.Round(time.Second))
	}
	if s, err := os.ReadFile(clusterDir + "/start-seconds"); err == nil {
		fmt.Fprintf(&b, "| cluster start | - | %ss (make cluster, binaries and images cached) |\n", strings.TrimSpace(string(s)))
	}
	fmt.Fprintf(&b, "| e2e total | - | %s |\n", time.Since(e.started).Round(time.Second))
	return b.String()
}

// run executes a repository tool (bin/helm, bin/cluster/kubectl, hack scripts)
// with the cluster's kubeconfig and returns its combined output.
func (e *env) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kcfg)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func (e *env) kubectl(ctx context.Context, args ...string) (string, error) {
	return e.run(ctx, e.root+"/bin/cluster/kubectl", args...)
}

func (e *env) helm(ctx context.Context, args ...string) (string, error) {
	return e.run(ctx, e.root+"/bin/helm", args...)
}

// stopError ends a poll at once (a state the awaited one can no longer follow).
type stopError struct{ error }

func stop(err error) error { return stopError{err} }

// poll calls f every interval until it returns true, or a stop error, or
// timeout passes; other errors are retried and reported on timeout.
func poll(ctx context.Context, interval, timeout time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := f()
		if s, isStop := err.(stopError); isStop {
			return s.error
		}
		if err != nil {
			last = err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("timed out after %s: %w", timeout, last)
			}
			return fmt.Errorf("timed out after %s", timeout)
		case <-time.After(interval):
		}
	}
}

// namespace creates an opted-in (or not) namespace with the checkpoint claim,
// backed by a hostPath PV every node can mount (the nodes are one machine).
func (e *env) namespace(ctx context.Context, t *testing.T, name string, optIn bool) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e.trainguard.io/test": "true"}, Annotations: map[string]string{}}}
	if optIn {
		ns.Annotations["trainguard.io/inject"] = "enabled"
		ns.Labels["trainguard.io/inject"] = "enabled"
	}
	if l := e.laneOf(t); l != "" {
		ns.Annotations[nsNodeSelector] = laneLabel + "=" + l
	}
	_ = e.cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	_ = poll(ctx, time.Second, 2*time.Minute, func() (bool, error) {
		_, err := e.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	dir := e.pvDir(name)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	pvName := "e2e-" + name
	_ = e.cs.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{})
	_ = poll(ctx, time.Second, time.Minute, func() (bool, error) {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	hostPathType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: mustQty("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "e2e-hostpath",
			ClaimRef:                      &corev1.ObjectReference{Namespace: name, Name: claimName},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostPathType}},
		},
	}
	if _, err := e.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PV: %v", err)
	}
	sc := "e2e-hostpath"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claimName, Namespace: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &sc,
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQty("1Gi")}},
		},
	}
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(name).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PVC: %v", err)
	}
	return name
}

func (e *env) pvDir(ns string) string { return clusterDir + "/pv/" + ns }

// createJob creates a PyTorchJob from its unstructured form.
func (e *env) createJob(ctx context.Context, job *unstructured.Unstructured) error {
	_, err := e.dyn.Resource(pytorchJobs).Namespace(job.GetNamespace()).Create(ctx, job, metav1.CreateOptions{})
	return err
}

// jobCondition returns the type of the job's latest true condition ("" if none).
func (e *env) jobCondition(ctx context.Context, ns, name string) (string, error) {
	job, err := e.dyn.Resource(pytorchJobs).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	conds, _, _ := unstructured.NestedSlice(job.Object, "status", "conditions")
	last := ""
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["status"] == "True" {
			last, _ = m["type"].(string)
		}
	}
	return last, nil
}

// pod returns the named pod, or nil when it does not exist.
func (e *env) pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return p, err
}

// waitPod waits until the pod exists and cond holds.
func (e *env) waitPod(ctx context.Context, ns, name string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var got *corev1.Pod
	err := poll(ctx, time.Second, timeout, func() (bool, error) {
		p, err := e.pod(ctx, ns, name)
		if err != nil || p == nil {
			return false, err
		}
		got = p
		return cond(p), nil
	})
	if err != nil {
		return got, fmt.Errorf("pod %s/%s: %w (last phase %s)", ns, name, err, phase(got))
	}
	return got, nil
}

func phase(p *corev1.Pod) string {
	if p == nil {
		return "absent"
	}
	s := string(p.Status.Phase)
	if p.DeletionTimestamp != nil {
		s += ", terminating"
	}
	return s + " on " + p.Spec.NodeName
}

func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
}

// logs returns the current container's log of the pod, with kubelet timestamps.
func (e *env) logs(ctx context.Context, ns, pod string) string {
	return e.containerLogs(ctx, ns, pod, "pytorch")
}

// containerLogs is logs for a named container (a TrainJob's is "node").
func (e *env) containerLogs(ctx context.Context, ns, pod, container string) string {
	raw, err := e.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Timestamps: true}).DoRaw(ctx)
	if err != nil {
		return ""
	}
	return string(raw)
}

func (e *env) deleteNamespace(ctx context.Context, ns string) {
	_ = e.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}
