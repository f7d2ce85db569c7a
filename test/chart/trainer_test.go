package chart

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/webhook"
)

// TestTrainerSupportFollowsTheAPI: the Trainer v2 webhook entries and RBAC
// render only when the cluster serves trainer.kubeflow.org/v1alpha1 (or
// trainer.enabled=true), point at the endpoints trainguard serves for each
// kind, and the cluster-scoped runtime's entry fails open; the namespaced
// kinds' CREATE and UPDATE are separate entries, UPDATE failing open.
func TestTrainerSupportFollowsTheAPI(t *testing.T) {
	helm, err := HelmBin()
	require.NoError(t, err)
	dir, err := Dir()
	require.NoError(t, err)
	api := []string{"--api-versions", "trainer.kubeflow.org/v1alpha1"}
	for name, tc := range map[string]struct {
		args []string
		want bool
	}{
		"no Trainer":           {nil, false},
		"Trainer served":       {api, true},
		"forced on":            {[]string{"--set", "trainer.enabled=true"}, true},
		"forced off":           {append([]string{"--set", "trainer.enabled=false"}, api...), false},
		"served, cluster-wide": {append([]string{"--set", "clusterWide=true"}, api...), true},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := RenderWith(helm, dir, "trainguard", "trainguard-system", tc.args...)
			require.NoError(t, err)
			_, vwc, err := WebhookConfigurations(objs)
			require.NoError(t, err)
			entries := trainerEntries(vwc)
			_, rbacErr := Find(objs, "ClusterRole", "trainguard-trainer")
			if !tc.want {
				assert.Empty(t, entries)
				assert.Error(t, rbacErr, "no Trainer RBAC without Trainer")
				return
			}
			require.NoError(t, rbacErr)
			require.Len(t, entries, 3)
			for _, a := range []*jobs.Adapter{jobs.TrainJob(), jobs.TrainingRuntime(), jobs.ClusterTrainingRuntime()} {
				es := entries[webhook.ValidatePath(a.GVK)]
				require.NotEmpty(t, es, a.Name)
				for _, e := range es {
					assert.Equal(t, []string{"trainer.kubeflow.org"}, e.Rules[0].APIGroups)
				}
				if a.Name == "clustertrainingruntime" {
					require.Len(t, es, 1)
					assert.Equal(t, admissionregistrationv1.Ignore, *es[0].FailurePolicy, "nothing outside opted-in namespaces is blocked while trainguard is down")
					assert.Equal(t, admissionregistrationv1.ClusterScope, *es[0].Rules[0].Scope)
					continue
				}
				// CREATE and UPDATE apart: only CREATE may fail closed.
				require.Len(t, es, 2, a.Name)
				for _, e := range es {
					assert.NotNil(t, e.NamespaceSelector, "namespaced kinds are validated only where trainguard acts")
					if slices.Contains(e.Rules[0].Operations, admissionregistrationv1.Update) {
						assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, e.Rules[0].Operations, e.Name)
						assert.Equal(t, admissionregistrationv1.Ignore, *e.FailurePolicy, "%s: an UPDATE never waits for trainguard", e.Name)
						assert.NotEmpty(t, e.MatchConditions, e.Name)
					}
				}
			}
		})
	}
}

// trainerEntries returns the Trainer entries by the path they call.
func trainerEntries(vwc *admissionregistrationv1.ValidatingWebhookConfiguration) map[string][]*admissionregistrationv1.ValidatingWebhook {
	out := map[string][]*admissionregistrationv1.ValidatingWebhook{}
	for i := range vwc.Webhooks {
		w := &vwc.Webhooks[i]
		if len(w.Rules) > 0 && len(w.Rules[0].APIGroups) > 0 && w.Rules[0].APIGroups[0] == "trainer.kubeflow.org" {
			out[*w.ClientConfig.Service.Path] = append(out[*w.ClientConfig.Service.Path], w)
		}
	}
	return out
}
