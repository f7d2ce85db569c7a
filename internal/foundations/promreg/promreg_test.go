package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRegisterReusesTheCollectorAlreadyRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}))
	require.NoError(t, err)
	second, err := Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}))
	require.NoError(t, err)
	assert.Same(t, first, second, "counts keep adding up in one collector")

	var errs []error
	Collect(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_total", Help: "other help"}), &errs)
	assert.Len(t, errs, 1, "a different collector under the same name is an error")
}
