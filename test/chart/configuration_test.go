package chart

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

// The chart renders the versioned Configuration, so trainguard never logs
// the deprecation of the unversioned format on a chart install, and the
// rescheduler switch reaches the file as well as the RBAC.
func TestChartRendersTheVersionedConfiguration(t *testing.T) {
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system", "rescheduler.enabled=false")
	require.NoError(t, err)
	_, raw := renderedConfig(t, objs, renderCase{fullname: "trainguard"})
	cfg, warnings, err := config.Parse([]byte(raw))
	require.NoError(t, err)
	assert.Empty(t, warnings, "rendered:\n%s", raw)
	assert.Contains(t, raw, "apiVersion: config.trainguard.io/v1alpha1")
	assert.Contains(t, raw, "kind: Configuration")
	assert.False(t, *cfg.Rescheduler.Enabled)
}

// The training container names have one source, config.trainingContainer.names:
// the configuration file always carries them, the pod matchConditions match
// on the same list, and both default to the Go default. Trainer's container
// name in the matchConditions is the one the Go code adds for TrainJob pods.
func TestTrainingContainerNamesHaveOneSource(t *testing.T) {
	helm, dir := helmAndChart(t)
	for name, tc := range map[string]struct {
		set  []string
		want []string
	}{
		"defaults":   {nil, configv1alpha1.Default().TrainingContainer.Names},
		"configured": {[]string{"config.trainingContainer.names={trainer,main}"}, []string{"trainer", "main"}},
		"emptied":    {[]string{"config.trainingContainer=null"}, configv1alpha1.Default().TrainingContainer.Names},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := Render(helm, dir, "trainguard", "trainguard-system", append(tc.set, "webhook.podMatchConditions=true")...)
			require.NoError(t, err)
			_, raw := renderedConfig(t, objs, renderCase{fullname: "trainguard"})
			cfg, _, err := config.Parse([]byte(raw))
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.TrainingContainer.Names, "the configuration file carries the names")
			m, _, err := WebhookConfigurations(objs)
			require.NoError(t, err)
			cel := ""
			for _, w := range m.Webhooks {
				if w.Name == "pods.mutate.trainguard.io" {
					require.Len(t, w.MatchConditions, 1)
					cel = w.MatchConditions[0].Expression
				}
			}
			assert.Contains(t, cel, "c.name in ['"+strings.Join(tc.want, "','")+"']", "the matchConditions match the same names")
			assert.Contains(t, cel, "c.name == '"+trainerv1alpha1.Node+"'", "and Trainer's trainer container for JobSet pods")
		})
	}
}
