package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func TestResolveLayersConfigNamespaceObject(t *testing.T) {
	cfg, _, err := config.Parse([]byte("checkpoint: {claim: from-config, preStopTimeout: 30s}\ngpu: {defaultCount: 2}\n"))
	require.NoError(t, err)
	ns := map[string]string{contract.AnnotationCheckpointClaim: "from-namespace", contract.AnnotationGPULimit: "4", contract.AnnotationTaskD: "disabled"}
	obj := map[string]string{contract.AnnotationCheckpointClaim: "from-object", contract.AnnotationPreStopTimeout: "2m"}
	p, warnings := Resolve(cfg, ns, obj)
	assert.Empty(t, warnings)
	assert.Equal(t, "from-object", p.CheckpointClaim, "object beats namespace")
	assert.Equal(t, int64(4), p.GPUCount, "namespace beats config")
	assert.Equal(t, 2*time.Minute, p.PreStopTimeout)
	assert.False(t, p.TaskD)
	assert.Equal(t, "/checkpoint", p.CheckpointPath, "config default")
}

func TestResolveBadValueWarnsAndKeepsLowerLayer(t *testing.T) {
	p, warnings := Resolve(configv1alpha1.Default(), map[string]string{contract.AnnotationGPULimit: "3"}, map[string]string{contract.AnnotationGPULimit: "lots"})
	assert.Equal(t, int64(3), p.GPUCount, "the namespace's value applies when the object's is bad")
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], `trainguard.io/gpu-limit="lots"`)
	assert.Contains(t, warnings[0], "object annotation")
}

func TestResolveToleratesUndefaultedConfig(t *testing.T) {
	p, _ := Resolve(&configv1alpha1.Configuration{}, nil, nil)
	assert.Equal(t, configv1alpha1.DefaultPreStopTimeout, p.PreStopTimeout)
}

// TestGPUDefaultForAndRequireDurable: gpu.defaultFor is an enum defaulting
// to AcceleratorJobs; it and checkpoint.requireDurable reach the policy.
func TestGPUDefaultForAndRequireDurable(t *testing.T) {
	cfg, _, err := config.Parse([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\n"))
	require.NoError(t, err)
	assert.Equal(t, configv1alpha1.GPUDefaultForAcceleratorJobs, cfg.GPU.DefaultFor)
	p, _ := Resolve(cfg, nil, nil)
	assert.False(t, p.GPUForAll)
	assert.False(t, p.RequireDurableCheckpoints)

	cfg, _, err = config.Parse([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\ngpu: {defaultFor: AllJobs}\ncheckpoint: {requireDurable: true}\n"))
	require.NoError(t, err)
	p, _ = Resolve(cfg, map[string]string{"trainguard.io/require-durable-checkpoints": "false"}, nil)
	assert.True(t, p.GPUForAll)
	assert.True(t, p.RequireDurableCheckpoints, "an annotation can only tighten it")

	p, _ = Resolve(configv1alpha1.Default(), nil, map[string]string{"trainguard.io/gpu-limit": "2"})
	assert.True(t, p.GPUForAll, "an explicit gpu-limit asks for the default on CPU jobs too")

	_, _, err = config.Parse([]byte("gpu: {defaultFor: everything}\n"))
	require.ErrorContains(t, err, `gpu.defaultFor: Unsupported value: "everything": supported values: "AcceleratorJobs", "AllJobs"`)
}
