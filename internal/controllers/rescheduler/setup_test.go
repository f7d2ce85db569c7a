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

	"github.com/trainguard/trainguard/internal/config"
)

// TestSetup wires the controller into a manager that is never started, so
// no API server is needed: it proves the builder, the index and the metrics
// registration fit together.
func TestSetup(t *testing.T) {
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Cache:   cache.Options{ByObject: CacheByObject("trainguard-system")},
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
	opts := DefaultOptions()
	opts.Namespace = "trainguard-system"
	require.NoError(t, Setup(mgr, config.DefaultConfig(), opts))

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

	bad := opts
	bad.MaxBadNodes = 0
	assert.Error(t, Setup(mgr, config.DefaultConfig(), bad))
	off := bad
	off.Enabled = false
	assert.NoError(t, Setup(mgr, config.DefaultConfig(), off), "disabled: nothing is set up, options unchecked")
}
