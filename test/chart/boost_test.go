package chart

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// The fence's bound on the priority boost is the maxBoost the binary gets:
// rendered from the same values as the configuration file, and the
// binary's default when unset (0 included, which a template's `default`
// would have taken for unset). Before, the fence allowed up to 9999999
// whatever the configuration said, with the boost on or off. With
// config.priorityBoost.enabled=false the fence refuses every Workload
// write, as RBAC grants no patch.
func TestFenceBoostBoundIsTheBinarysMaxBoost(t *testing.T) {
	helm, dir := helmAndChart(t)
	on := "config.priorityBoost.enabled=true"
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{name: "off (the default)"},
		{name: "off, maxBoost 500", set: []string{"config.priorityBoost.maxBoost=500"}},
		{name: "on, maxBoost as shipped", set: []string{on}},
		{name: "on, maxBoost unset", set: []string{on, "config.priorityBoost.maxBoost=null"}},
		{name: "on, maxBoost 0", set: []string{on, "config.priorityBoost.maxBoost=0"}},
		{name: "on, maxBoost 1", set: []string{on, "config.priorityBoost.maxBoost=1"}},
		{name: "on, maxBoost 1000000", set: []string{on, "config.priorityBoost.maxBoost=1000000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Render(helm, dir, "trainguard", "trainguard-system", tc.set...)
			require.NoError(t, err)
			cfg, _ := renderedConfig(t, objs, renderCase{fullname: "trainguard"})
			pb := cfg.WithDefaults().PriorityBoost
			o := OfKind(objs, "ValidatingAdmissionPolicy")
			require.Len(t, o, 1)
			vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			require.NoError(t, Into(o[0], vap))
			vars := map[string]string{}
			for _, v := range vap.Spec.Variables {
				vars[v.Name] = v.Expression
			}
			var refusesWorkloads bool
			for _, v := range vap.Spec.Validations {
				refusesWorkloads = refusesWorkloads || v.Expression == "!variables.isKueueWorkload"
			}
			if !pb.Enabled {
				assert.NotContains(t, vars, "maxBoost", "no boost allowed with the boost off")
				assert.True(t, refusesWorkloads, "with the boost off the fence refuses every Workload write")
				return
			}
			assert.False(t, refusesWorkloads)
			assert.Equal(t, strconv.Itoa(int(*pb.MaxBoost)), vars["maxBoost"], "the fence's bound is the binary's maxBoost")
			assert.Contains(t, vars["boostInBounds"], "<= variables.maxBoost")
		})
	}
}

// A flag in extraArgs wins over the configuration file; for the boost's
// switch and bound it would leave RBAC and the fence, rendered from
// config.priorityBoost, disagreeing with the binary: the chart refuses it.
func TestExtraArgsMayNotSetTheBoost(t *testing.T) {
	helm, dir := helmAndChart(t)
	for _, arg := range []string{"--priority-boost-enabled", "--priority-boost-enabled=true", "--priority-boost-max-boost=500"} {
		_, err := Render(helm, dir, "trainguard", "trainguard-system", "extraArgs={"+arg+"}")
		require.Error(t, err, arg)
		assert.Contains(t, err.Error(), "set config.priorityBoost.enabled and config.priorityBoost.maxBoost instead", arg)
	}
	_, err := Render(helm, dir, "trainguard", "trainguard-system", "extraArgs={--priority-boost-min-interval=2m}")
	assert.NoError(t, err, "the boost's other settings may be flags")
}
