package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/trainguard/trainguard/internal/testing/builders"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainguard/trainguard/internal/controllers/boost"
	"github.com/trainguard/trainguard/internal/controllers/outcome"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/test/chart"
)

// notTrainguards are metrics the alerts and dashboard use that trainguard
// does not export: the API server's, cert-manager's and Prometheus's own.
var notTrainguards = regexp.MustCompile(`^(apiserver_|certmanager_)|^up$`)

// pending are trainguard metrics another change adds (the rescheduler's
// brake gauge); listed here until it lands, then this list empties.
var pending = map[string]bool{}

// needKueue are the work-at-risk gauges (internal/controllers/boost): their
// series exist only for admitted Kueue Workloads of training jobs whose
// trainer answers on its status port, which this suite (no Kueue, no
// running trainer) cannot produce. The scenario checkpoint-aware-preemption
// of make e2e reads them from a running trainguard; the names are checked
// against the package's constants here.
var needKueue = map[string]bool{
	boost.MetricSecondsAtRisk: true, boost.MetricStepsAtRisk: true, boost.MetricFits: true, boost.MetricBoost: true,
}

// Every metric an alert or a dashboard panel queries exists in a running
// trainguard's metrics (read in-process from the registry /metrics serves,
// so the test does not depend on how /metrics is secured), after trainguard
// has done each kind of work once. Renaming a metric fails this test.
func TestMetricsUsedByAlertsAndDashboardExist(t *testing.T) {
	exercise(t)
	have := exported(t)
	used := usedMetrics(t, render(t))
	require.Greater(t, len(used), 10, "the extractor found the metrics the chart uses")
	for _, name := range missing(used, have) {
		t.Errorf("%s is used by %s but trainguard exports no such metric", name, strings.Join(used[name], ", "))
	}
	for name := range pending {
		if have[name] {
			t.Logf("%s now exists: remove it from the pending list", name)
		}
	}

	// The check can fail: the dashboard with a renamed metric does.
	dash := dashboardJSON(t)
	renamed := strings.ReplaceAll(dash, "trainguard_checkpoint_total", "trainguard_checkpoints_total")
	got := missing(metricsOfDashboard(t, renamed, "dashboard"), have)
	assert.Equal(t, []string{"trainguard_checkpoints_total"}, got)
}

// missing lists the used metrics trainguard does not export.
func missing(used map[string][]string, have map[string]bool) []string {
	var out []string
	for name := range used {
		if !have[name] && !notTrainguards.MatchString(name) && !pending[name] && !needKueue[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// exported returns the series names trainguard's registry exposes:
// counters and gauges by name, histograms also as _bucket, _sum, _count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	fams, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				have[f.GetName()+s] = true
			}
		case dto.MetricType_SUMMARY:
			have[f.GetName()+"_sum"], have[f.GetName()+"_count"] = true, true
		}
	}
	return have
}

// usedMetrics maps each metric the rendered alerts and dashboard query to
// where it is used.
func usedMetrics(t *testing.T, objs []*unstructured.Unstructured) map[string][]string {
	t.Helper()
	used := metricsOfDashboard(t, dashboardJSON(t), "dashboard")
	rules := chart.OfKind(objs, "PrometheusRule")
	require.Len(t, rules, 1)
	for _, r := range ruleExprs(t, rules[0]) {
		for _, n := range MetricNames(r.expr) {
			used[n] = append(used[n], "alert "+r.alert)
		}
	}
	// The ConfigMap the chart renders carries the same dashboard.
	cms := chart.OfKind(objs, "ConfigMap")
	found := false
	for _, cm := range cms {
		if cm.GetLabels()["grafana_dashboard"] == "1" {
			data, _, _ := unstructured.NestedString(cm.Object, "data", "trainguard.json")
			assert.JSONEq(t, dashboardJSON(t), data, "the ConfigMap holds dashboards/trainguard.json")
			found = true
		}
	}
	assert.True(t, found, "the chart renders the dashboard ConfigMap with the sidecar label")
	return used
}

func dashboardJSON(t *testing.T) string {
	t.Helper()
	dir, err := chart.Dir()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(dir, "dashboards", "trainguard.json"))
	require.NoError(t, err)
	return string(raw)
}

// metricsOfDashboard reads every panel query and every template variable
// query of a Grafana dashboard.
func metricsOfDashboard(t *testing.T, dashboard, where string) map[string][]string {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal([]byte(dashboard), &d))
	used := map[string][]string{}
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q queries nothing", p.Title)
		for _, tg := range p.Targets {
			for _, n := range MetricNames(tg.Expr) {
				used[n] = append(used[n], fmt.Sprintf("%s panel %q", where, p.Title))
			}
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil || q.Query == "" {
			continue
		}
		if m := labelValues.FindStringSubmatch(q.Query); m != nil {
			used[m[1]] = append(used[m[1]], fmt.Sprintf("%s variable %q", where, v.Name))
		}
	}
	return used
}

// exercise makes trainguard do each kind of work once, so every metric has
// a series: admission of a job and a pod, a pod's checkpoint outcome, and a
// rescheduling decision (retryable exit on a node: record + graceful delete).
func exercise(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := env.cp.Client
	ns := "obs-metrics"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Annotations: map[string]string{contract.AnnotationInject: contract.InjectEnabled},
	}}))
	job := builders.MakeKubeflowJob(ns, "observed").WithExitCodeWorkers(1).Unstructured()
	require.Eventually(t, func() bool { return c.Create(ctx, job.DeepCopy(), client.DryRunAll) == nil }, 15*time.Second, 50*time.Millisecond)
	require.NoError(t, c.Create(ctx, job))
	node := readyNode(t, "obs-node")
	pod := workerOf(t, job)
	pod.Spec.NodeName = node
	require.NoError(t, c.Create(ctx, pod))
	require.Equal(t, "true", pod.Labels[contract.LabelManaged])
	saved := contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 10, Bytes: 5 << 20, Seconds: 2.5}
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		cur.Status.Phase = corev1.PodFailed
		cur.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "pytorch", Image: "example.com/train:1", Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "Error", Message: saved.Line(), StartedAt: metav1.Now(), FinishedAt: metav1.Now(),
			}},
		}}
		return c.Status().Update(ctx, cur)
	}))
	for _, name := range []string{outcome.MetricBytes, "trainguard_rescheduler_pod_deletions_total", "trainguard_rescheduler_decisions_total"} {
		require.Eventually(t, func() bool { return hasSeries(t, name) }, 20*time.Second, 50*time.Millisecond, "trainguard exports %s after the work", name)
	}
}

func hasSeries(t *testing.T, name string) bool {
	fams, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				if m.GetCounter().GetValue() > 0 || m.GetHistogram().GetSampleCount() > 0 {
					return true
				}
			}
		}
	}
	return false
}

// workerOf is the pod kubeflow's operator creates from the admitted job's
// (injected) template.
func workerOf(t *testing.T, job *unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	raw, found, err := unstructured.NestedMap(job.Object, "spec", "pytorchReplicaSpecs", "Worker", "template")
	require.NoError(t, err)
	require.True(t, found)
	var tmpl corev1.PodTemplateSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl))
	pod := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	pod.Namespace, pod.Name = job.GetNamespace(), job.GetName()+"-worker-0"
	pod.Labels["training.kubeflow.org/job-name"] = job.GetName()
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: job.GetAPIVersion(), Kind: job.GetKind(), Name: job.GetName(), UID: job.GetUID(), Controller: ptr.To(true),
	}}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return pod
}

func readyNode(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	c := env.cp.Client
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	require.NoError(t, c.Create(ctx, node))
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour)),
	}}
	require.NoError(t, c.Status().Update(ctx, node))
	return name
}
