package chart

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/policy"
)

// The chart renders the versioned Configuration, so trainguard never logs
// the deprecation of the unversioned format on a chart install, and the
// rescheduler switch reaches the file as well as the RBAC.
func TestChartRendersTheVersionedConfiguration(t *testing.T) {
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system", "rescheduler.enabled=false")
	require.NoError(t, err)
	_, raw := renderedConfig(t, objs, renderCase{fullname: "trainguard"})
	cfg, warnings, err := policy.Parse([]byte(raw))
	require.NoError(t, err)
	assert.Empty(t, warnings, "rendered:\n%s", raw)
	assert.Contains(t, raw, "apiVersion: config.trainguard.io/v1alpha1")
	assert.Contains(t, raw, "kind: Configuration")
	assert.False(t, *cfg.Rescheduler.Enabled)
}
