package observability

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/test/chart"
)

// The ServiceMonitor, the PrometheusRule and the dashboard ConfigMap pass a
// server-side dry run against the real API server with prometheus-operator's
// CRDs, in both certificate modes; a broken ServiceMonitor does not, so the
// CRD's schema is really in force.
func TestMonitoringObjectsServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	for name, set := range map[string][]string{
		"cert-manager": nil,
		"self-managed": {"certManager.enabled=false"},
		"labels":       {"monitoring.serviceMonitor.labels.release=kube-prometheus-stack", "monitoring.prometheusRule.labels.release=kube-prometheus-stack", "monitoring.grafanaDashboard.annotations.grafana_folder=Platform"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, set...)
			var kinds []string
			for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
				for _, o := range chart.OfKind(objs, kind) {
					require.NoError(t, env.cp.Client.Create(ctx, o.DeepCopy(), client.DryRunAll), "%s %s", kind, o.GetName())
					kinds = append(kinds, kind)
				}
			}
			for _, cm := range chart.OfKind(objs, "ConfigMap") {
				if cm.GetLabels()["grafana_dashboard"] == "1" {
					require.NoError(t, env.cp.Client.Create(ctx, cm.DeepCopy(), client.DryRunAll), "dashboard ConfigMap")
					kinds = append(kinds, "dashboard")
				}
			}
			assert.ElementsMatch(t, []string{"ServiceMonitor", "PrometheusRule", "dashboard"}, kinds)
		})
	}

	sm := chart.OfKind(render(t), "ServiceMonitor")[0].DeepCopy()
	endpoints, _, err := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	require.NoError(t, err)
	endpoints[0].(map[string]any)["scheme"] = "gopher"
	require.NoError(t, unstructured.SetNestedSlice(sm.Object, endpoints, "spec", "endpoints"))
	err = env.cp.Client.Create(ctx, sm, client.DryRunAll)
	assert.True(t, apierrors.IsInvalid(err), "an invalid scheme is refused by the CRD schema: %v", err)
}

// Off by default: the default chart renders none of them.
func TestMonitoringOffByDefault(t *testing.T) {
	objs, err := chart.RenderShipped("trainguard", "trainguard-system")
	require.NoError(t, err)
	assert.Empty(t, chart.OfKind(objs, "ServiceMonitor"))
	assert.Empty(t, chart.OfKind(objs, "PrometheusRule"))
	for _, cm := range chart.OfKind(objs, "ConfigMap") {
		assert.NotEqual(t, "1", cm.GetLabels()["grafana_dashboard"])
	}
}
