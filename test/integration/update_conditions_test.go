package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// decisions counts trainguard's answers on one endpoint so far.
func decisions(t *testing.T, webhookName string) float64 {
	t.Helper()
	return counterSum(t, "trainguard_admission_decisions_total", "webhook", webhookName)
}

// TestUpdateMatchConditionsSendOnlyWhatTrainguardChecks: with trainguard up,
// the chart's UPDATE matchConditions (evaluated by the real API server) keep
// label-only updates away from trainguard and still send the updates it
// must judge, which it refuses with a field path.
func TestUpdateMatchConditionsSendOnlyWhatTrainguardChecks(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	p := newPod(ns, "watched").Obj()
	require.NoError(t, env.c.Create(ctx, p))

	before := decisions(t, "validate-pod")
	p.Labels["team"] = "vision"
	require.NoError(t, env.c.Update(ctx, p))
	assert.Equal(t, before, decisions(t, "validate-pod"), "a label-only update must not be sent to trainguard")

	p.Annotations[contract.AnnotationGPULimit] = "lots"
	err := env.c.Update(ctx, p)
	require.Error(t, err, "a bad trainguard annotation set by an update must be judged and refused")
	assert.Contains(t, err.Error(), "metadata.annotations[trainguard.io/gpu-limit]")
	assert.Equal(t, before+1, decisions(t, "validate-pod"))

	j := job(t, ns, "watched", masterWorkerSpec)
	require.NoError(t, env.c.Create(ctx, j))
	beforeJob := decisions(t, "validate-pytorchjob")
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(j), j))
	j.SetLabels(map[string]string{"team": "vision"})
	require.NoError(t, env.c.Update(ctx, j))
	assert.Equal(t, beforeJob, decisions(t, "validate-pytorchjob"), "a job's label-only update must not be sent")

	require.NoError(t, unstructured.SetNestedField(j.Object, int64(3), "spec", "pytorchReplicaSpecs", "Worker", "replicas"))
	require.NoError(t, env.c.Update(ctx, j))
	assert.Equal(t, beforeJob+1, decisions(t, "validate-pytorchjob"), "a spec change is sent to trainguard")
}
