package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/controllers/warning"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/test/controlplane"
)

// fakeTrainer is one job's trainer behind its status port: it accepts a
// checkpoint-now request at the step it is at and commits that step, as
// the SDK does (POST /trainguard/checkpoint, GET /trainguard/status).
type fakeTrainer struct {
	mu        sync.Mutex
	step      int64
	committed int64
	reasons   []string
}

func (f *fakeTrainer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.step++ // training goes on
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/trainguard/checkpoint":
		var body struct {
			Format int    `json:"format"`
			Reason string `json:"reason"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1024)).Decode(&body); err != nil || body.Format != 1 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		f.reasons = append(f.reasons, body.Reason)
		f.committed = f.step // commits the step it acknowledges
		w.WriteHeader(http.StatusAccepted)
		_, _ = fmt.Fprintf(w, `{"format":1,"step":%d}`, f.step)
	case r.Method == http.MethodGet && r.URL.Path == contract.StatusPath:
		now := float64(time.Now().Unix())
		_, _ = fmt.Fprintf(w, `{"format":1,"now":%v,"step":%d,"committed_step":%d,"committed_at":%v}`, now, f.step, f.committed, now-1)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeTrainer) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reasons...)
}

// routedTrainers speaks HTTP to the fake trainer whatever the pod IP (no
// pod network here) and records the IPs asked.
type routedTrainers struct {
	url string
	mu  sync.Mutex
	ips []string
}

func (t *routedTrainers) RequestCheckpoint(ctx context.Context, podIP, reason string) (int64, error) {
	t.mu.Lock()
	t.ips = append(t.ips, podIP)
	t.mu.Unlock()
	body, err := json.Marshal(map[string]any{"format": 1, "reason": reason})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url+"/trainguard/checkpoint", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusTooManyRequests {
		return 0, warning.ErrRateLimited
	}
	var ack struct{ Step int64 }
	if resp.StatusCode != http.StatusAccepted {
		return 0, fmt.Errorf("answered %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&ack); err != nil {
		return 0, err
	}
	return ack.Step, nil
}

func (t *routedTrainers) Status(ctx context.Context, _ string) (int64, *int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url+contract.StatusPath, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return 0, nil, err
	}
	s, err := trainerstatus.ParseStatus(raw)
	return s.Step, s.CommittedStep, err
}

func (t *routedTrainers) asked() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.ips...)
}

// startWarningController runs the node-warning controller on a manager of
// its own, with the caches trainguard's process creates, until the test ends.
func startWarningController(t *testing.T, cfg *configv1alpha1.Configuration, trainers warning.Trainers) {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(env.cp.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{
			ByObject:         rescheduler.CacheByObject(controlplane.Namespace, jobs.Builtin()),
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	require.NoError(t, warning.Setup(mgr, cfg, jobs.Builtin(), controlplane.Namespace, true, trainers))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// workerPod is the pod kubeflow's operator creates for the job's first
// worker, from the template the webhook injected, on node.
func workerPod(t *testing.T, j *unstructured.Unstructured, node string) *corev1.Pod {
	t.Helper()
	raw, found, err := unstructured.NestedMap(j.Object, "spec", "pytorchReplicaSpecs", "Worker", "template")
	require.NoError(t, err)
	require.True(t, found)
	var tmpl corev1.PodTemplateSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl))
	pod := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	pod.Namespace, pod.Name, pod.Spec.NodeName = j.GetNamespace(), j.GetName()+"-worker-0", node
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels["training.kubeflow.org/job-name"] = j.GetName()
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: j.GetAPIVersion(), Kind: j.GetKind(), Name: j.GetName(), UID: j.GetUID(), Controller: ptr.To(true)}}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return pod
}

// setNodeConditions writes the node's conditions through the status
// subresource, as the kubelet or a node agent does.
func setNodeConditions(t *testing.T, name string, conds ...corev1.NodeCondition) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := env.c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		n.Status.Conditions = conds
		return env.c.Status().Update(ctx, n)
	}))
}

func condition(typ string, status corev1.ConditionStatus) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
}

// TestNodeWarningAsksTheJobToCheckpoint: a GPU health agent's condition
// on the node of a PyTorchJob's worker, written through the real API
// server's status subresource, reaches the trainer as one checkpoint-now
// request at the worker's pod IP, and the job gets the Event naming the
// node, the condition and the step committed.
func TestNodeWarningAsksTheJobToCheckpoint(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	trainer := &fakeTrainer{step: 700, committed: 600}
	srv := httptest.NewServer(trainer)
	t.Cleanup(srv.Close)
	trainers := &routedTrainers{url: srv.URL}
	cfg := configv1alpha1.Default()
	// A condition the in-process trainguard (default conditions) does not
	// listen to: only the controller under test acts on it.
	cfg.NodeWarnings.Conditions = []string{"example.com/GPUHealthy=False"}
	startWarningController(t, cfg, trainers)

	j := job(t, ns, "llm", masterWorkerSpec)
	require.NoError(t, env.c.Create(ctx, j))
	node := ns + "-gpu"
	require.NoError(t, env.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))
	t.Cleanup(func() {
		_ = env.c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	setNodeConditions(t, node, condition("Ready", corev1.ConditionTrue), condition("example.com/GPUHealthy", corev1.ConditionTrue))

	pod := workerPod(t, j, node)
	require.NoError(t, env.c.Create(ctx, pod))
	require.Equal(t, "true", pod.Labels[contract.LabelManaged], "the webhook marked the worker managed")
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "10.244.1.7"
	pod.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.7"}}
	require.NoError(t, env.c.Status().Update(ctx, pod))
	time.Sleep(time.Second) // the healthy node and the pod reach the cache: nobody is asked
	assert.Empty(t, trainers.asked())

	setNodeConditions(t, node, condition("Ready", corev1.ConditionTrue), condition("example.com/GPUHealthy", corev1.ConditionFalse))
	require.Eventually(t, func() bool { return len(trainers.asked()) > 0 }, 20*time.Second, 100*time.Millisecond,
		"the warning reaches the trainer")
	assert.Equal(t, []string{"10.244.1.7"}, trainers.asked(), "one request, at the worker's pod IP")
	assert.Equal(t, []string{"node " + node + " warns: example.com/GPUHealthy=False"}, trainer.asked())

	var found *eventsv1.Event
	require.Eventually(t, func() bool {
		var list eventsv1.EventList
		require.NoError(t, env.c.List(ctx, &list, client.InNamespace(ns)))
		for i, e := range list.Items {
			if e.Reason == warning.ReasonCheckpointOnWarning && e.Regarding.Kind == "PyTorchJob" && e.Regarding.Name == "llm" {
				found = &list.Items[i]
				return true
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "an Event on the job")
	assert.Equal(t, warning.ControllerName, found.ReportingController)
	assert.Equal(t, corev1.EventTypeNormal, found.Type)
	assert.True(t, strings.HasPrefix(found.Note, "node "+node+" warns (example.com/GPUHealthy=False): step 701 committed"), found.Note)

	// The condition flaps: no second request within the interval.
	setNodeConditions(t, node, condition("Ready", corev1.ConditionTrue), condition("example.com/GPUHealthy", corev1.ConditionTrue))
	setNodeConditions(t, node, condition("Ready", corev1.ConditionTrue), condition("example.com/GPUHealthy", corev1.ConditionFalse))
	time.Sleep(2 * time.Second)
	assert.Len(t, trainers.asked(), 1, "nodeWarnings.minInterval holds a flapping condition to one request")
}
