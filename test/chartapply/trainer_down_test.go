package chartapply

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/testing/builders"
	"github.com/trainguard/trainguard/test/chart"
)

// installTrainguardDown creates the rendered validating entries that match
// keep (by name) in the real API server. Nothing serves them: this is
// trainguard down, as the API server sees it. Their namespaceSelectors are
// narrowed to tenant and they are deleted when the test ends, so the other
// tests in the package never meet them.
func installTrainguardDown(t *testing.T, release, namespace, tenant string, keep func(name string) bool, set ...string) {
	t.Helper()
	ctx := context.Background()
	objs := renderChart(t, release, namespace, set...)
	_, v, err := chart.WebhookConfigurations(objs)
	require.NoError(t, err)
	var kept []admissionregistrationv1.ValidatingWebhook
	for _, w := range v.Webhooks {
		if keep(w.Name) {
			if w.NamespaceSelector != nil {
				w.NamespaceSelector = onlyNamespace(w.NamespaceSelector, tenant)
			}
			kept = append(kept, w)
		}
	}
	require.NotEmpty(t, kept)
	v.Webhooks = kept
	require.NoError(t, apiServer.c.Create(ctx, v))
	t.Cleanup(func() { _ = apiServer.c.Delete(context.Background(), v) })
}

// trainerObject is a minimal TrainJob, TrainingRuntime or
// ClusterTrainingRuntime (namespace "" for the last).
func trainerObject(kind, namespace, name string, finalizers ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
		"metadata": map[string]any{"name": name, "labels": map[string]any{"team": "ml"}},
	}}
	if kind == "TrainJob" {
		u.Object["spec"] = map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "suspend": true}
	} else {
		container := map[string]any{"name": "node", "image": "example.com/train:1"}
		job := map[string]any{"name": "node", "template": map[string]any{"spec": map[string]any{"template": map[string]any{
			"spec": map[string]any{"containers": []any{container}}}}}}
		u.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{job}}}}
	}
	u.SetNamespace(namespace)
	u.SetFinalizers(finalizers)
	return u
}

// With trainguard down, an opted-in namespace still
// refuses a new TrainJob or TrainingRuntime (fail closed), but every UPDATE
// goes through: Kueue's suspend toggle, a label edit, Trainer's
// resource-in-use finalizer on a runtime, and the finalizer removal that
// lets a deleted TrainJob go. With CREATE and UPDATE in one fail-closed
// entry, each of them was refused and TrainJobs stuck in Terminating.
func TestTrainerUpdatesGoThroughWhileTrainguardDown(t *testing.T) {
	ctx := context.Background()
	const release, ns = "tgdown", "tgdown-system"
	tenant := "tgdown-in"
	tenantNamespace(t, tenant, optIn("enabled"))
	const hold, inUse = "example.com/hold", "trainer.kubeflow.org/resource-in-use"
	job := trainerObject("TrainJob", tenant, "waiting", hold)
	runtime := trainerObject("TrainingRuntime", tenant, "torch")
	cluster := trainerObject("ClusterTrainingRuntime", "", "tgdown-torch")
	for _, o := range []*unstructured.Unstructured{job, runtime, cluster} {
		require.NoError(t, apiServer.c.Create(ctx, o), "created while trainguard was up: %s", o.GetKind())
	}
	t.Cleanup(func() { _ = apiServer.c.Delete(context.Background(), cluster) })

	installTrainguardDown(t, release, ns, tenant, func(name string) bool {
		return strings.Contains(name, "trainingruntimes") || strings.HasPrefix(name, "trainjobs")
	},
		"trainer.enabled=true")
	require.Eventually(t, func() bool {
		err := apiServer.c.Create(ctx, trainerObject("TrainJob", tenant, "refused"), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "trainjobs.validate.trainguard.io")
	}, 30*time.Second, 100*time.Millisecond, "a new TrainJob in an opted-in namespace is refused while trainguard is down (fail closed)")
	err := apiServer.c.Create(ctx, trainerObject("TrainingRuntime", tenant, "refused"), client.DryRunAll)
	require.Error(t, err, "a new TrainingRuntime too")
	assert.Contains(t, err.Error(), "trainingruntimes.validate.trainguard.io")

	patch := func(o *unstructured.Unstructured, p string) error {
		return apiServer.c.Patch(ctx, o.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(p)))
	}
	for what, p := range map[string]string{
		"a label edit":                                  `{"metadata":{"labels":{"team":"vision"}}}`,
		"Kueue's suspend toggle (a spec change)":        `{"spec":{"suspend":false}}`,
		"suspending it again":                           `{"spec":{"suspend":true}}`,
		"a trainguard annotation (checked, fails open)": `{"metadata":{"annotations":{"trainguard.io/max-reschedules":"3"}}}`,
	} {
		assert.NoError(t, patch(job, p), "TrainJob: %s while trainguard is down", what)
	}
	for _, rt := range []*unstructured.Unstructured{runtime, cluster} {
		assert.NoError(t, patch(rt, `{"metadata":{"labels":{"team":"vision"}}}`), "%s: a label edit", rt.GetKind())
		assert.NoError(t, patch(rt, fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, inUse)), "%s: Trainer's resource-in-use finalizer", rt.GetKind())
		assert.NoError(t, patch(rt, `{"metadata":{"finalizers":null}}`), "%s: Trainer releasing it", rt.GetKind())
	}

	// Deleted, the TrainJob waits for its finalizer; removing it (as the
	// garbage collector or a controller does) is an UPDATE that must pass.
	require.NoError(t, apiServer.c.Delete(ctx, job.DeepCopy()))
	assert.NoError(t, patch(job, `{"metadata":{"finalizers":null}}`), "removing the last finalizer of a Terminating TrainJob")
	err = apiServer.c.Get(ctx, client.ObjectKeyFromObject(job), job.DeepCopy())
	assert.True(t, apierrors.IsNotFound(err), "the TrainJob is gone, not stuck in Terminating: %v", err)
}

// A user's batch Job is checked at creation and fails
// closed with trainguard down, like a PyTorchJob; a Job a CronJob or a
// JobSet (a TrainJob's) makes is never sent (the no-controller
// matchCondition, evaluated by the real API server), so trainguard down
// never blocks them, and an UPDATE of any Job (Kueue's suspend toggle, a
// label) goes through.
func TestControlledBatchJobsPassWhileTrainguardDown(t *testing.T) {
	ctx := context.Background()
	const release, ns, tenant = "jobdown", "jobdown-system", "jobdown-in"
	tenantNamespace(t, tenant, optIn("enabled"))
	unstructuredOf := func(raw []byte) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(raw))
		return u
	}
	running := unstructuredOf(builders.MakeBatchJob(tenant, "running").JSON())
	require.NoError(t, apiServer.c.Create(ctx, running), "created while trainguard was up")

	installTrainguardDown(t, release, ns, tenant, func(name string) bool { return strings.HasPrefix(name, "jobs") })
	require.Eventually(t, func() bool {
		err := apiServer.c.Create(ctx, unstructuredOf(builders.MakeBatchJob(tenant, "refused").JSON()), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "jobs.validate.trainguard.io")
	}, 30*time.Second, 100*time.Millisecond, "a user's new Job in an opted-in namespace is refused while trainguard is down (fail closed)")

	for _, owner := range []struct{ apiVersion, kind string }{{"batch/v1", "CronJob"}, {"jobset.x-k8s.io/v1alpha2", "JobSet"}} {
		made := builders.MakeBatchJob(tenant, "made-by-"+strings.ToLower(owner.kind)).ControlledBy(owner.apiVersion, owner.kind, "parent")
		assert.NoError(t, apiServer.c.Create(ctx, unstructuredOf(made.JSON()), client.DryRunAll),
			"a %s's Job is its controller's: never sent, never blocked", owner.kind)
	}
	for what, p := range map[string]string{
		"a label edit":                           `{"metadata":{"labels":{"team":"vision"}}}`,
		"Kueue's suspend toggle (a spec change)": `{"spec":{"suspend":true}}`,
	} {
		assert.NoError(t, apiServer.c.Patch(ctx, running.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(p))), "%s while trainguard is down", what)
	}
}
