package rescheduler

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/jobs"
)

// TestSetup wires the controller into a manager that is never started, so
// no API server is needed: it proves the builder, the index and the metrics
// registration fit together.
func TestSetup(t *testing.T) {
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Cache:   cache.Options{ByObject: CacheByObject("trainguard-system", jobs.Builtin())},
		Metrics: metricsserver.Options{BindAddress: "0"},
		// A static mapper: the manager must not need an API server here.
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
			m := meta.NewDefaultRESTMapper(nil)
			for _, kind := range []string{"Pod", "ConfigMap", "Event"} {
				m.Add(corev1.SchemeGroupVersion.WithKind(kind), meta.RESTScopeNamespace)
			}
			m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
			m.Add(coordinationv1.SchemeGroupVersion.WithKind("Lease"), meta.RESTScopeNamespace)
			return m, nil
		},
	})
	require.NoError(t, err)
	require.NoError(t, Setup(mgr, configv1alpha1.Default(), jobs.Builtin(), "trainguard-system"))

	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	// Counters without samples are not gathered; vectors show up once used,
	// plain counters at once.
	assert.Contains(t, names, metricBadNodes)
	assert.Contains(t, names, metricRecreated)

	// A Configuration built in code gets the file's check, in its words.
	bad := configv1alpha1.Default()
	bad.Rescheduler.MaxBadNodes = 0
	assert.ErrorContains(t, Setup(mgr, bad, jobs.Builtin(), "trainguard-system"), "rescheduler.maxBadNodes: Invalid value: 0: must be at least 1")
	assert.ErrorContains(t, Setup(mgr, configv1alpha1.Default(), jobs.Builtin(), ""), "set --namespace")
	*bad.Rescheduler.Enabled = false
	assert.NoError(t, Setup(mgr, bad, jobs.Builtin(), ""), "disabled: nothing is set up, settings unchecked")
}
