package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func TestResolveLayersConfigNamespaceObject(t *testing.T) {
	cfg, err := ParseConfig([]byte("checkpoint: {claim: from-config, preStopTimeout: 30s}\ngpu: {defaultCount: 2}\n"))
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
	p, warnings := Resolve(DefaultConfig(), map[string]string{contract.AnnotationGPULimit: "3"}, map[string]string{contract.AnnotationGPULimit: "lots"})
	assert.Equal(t, int64(3), p.GPUCount, "the namespace's value applies when the object's is bad")
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], `trainguard.io/gpu-limit="lots"`)
	assert.Contains(t, warnings[0], "object annotation")
}

func TestResolveToleratesUndefaultedConfig(t *testing.T) {
	p, _ := Resolve(&Config{}, nil, nil)
	assert.Equal(t, DefaultPreStopTimeout, p.PreStopTimeout)
}

func TestConfigIsStrict(t *testing.T) {
	_, err := ParseConfig([]byte("checkpoint: {claim: x, preStopTimout: 30s}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "preStopTimout")
	_, err = ParseConfig([]byte("checkpoint: {path: /proc/x}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "checkpoint.path")
	_, err = ParseConfig([]byte("mutators: {gpus: false}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mutators[gpus]")
}

func TestLoadConfigErrors(t *testing.T) {
	_, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reading config file")
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("clusterWide: true\n"), 0o600))
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	assert.True(t, cfg.ClusterWide)
	assert.True(t, cfg.Excluded("kube-system"), "kube-system is always excluded")
}

// TestConfigReferenceShowsTheDefaults keeps docs/config-reference.yaml (in
// the README) honest: it must load strictly and equal the built-in defaults.
func TestConfigReferenceShowsTheDefaults(t *testing.T) {
	cfg, warnings, err := Load(filepath.Join("..", "..", "docs", "config-reference.yaml"))
	require.NoError(t, err)
	assert.Empty(t, warnings, "the reference shows the current, versioned format")
	want := DefaultConfig()
	want.Mutators = map[string]bool{}
	assert.Equal(t, want, cfg)
}

func TestConfigurationIsVersionedAndDefaulted(t *testing.T) {
	cfg, warnings, err := Parse([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\nrescheduler: {maxBadNodes: 2}\n"))
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.Equal(t, 2, cfg.Rescheduler.MaxBadNodes)
	assert.True(t, *cfg.Rescheduler.Enabled)
	assert.Equal(t, DefaultNodeLostGrace, cfg.Rescheduler.NodeLostGrace.Duration)

	_, warnings, err = Parse([]byte("clusterWide: true\n"))
	require.NoError(t, err)
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "deprecated")

	_, _, err = Parse([]byte("apiVersion: v1\nkind: ConfigMap\n"))
	require.ErrorContains(t, err, `apiVersion "v1" kind "ConfigMap" is not supported`)

	_, _, err = Parse([]byte("rescheduler: {backoffBase: 1m, backoffMax: 10s, nodeLostGrace: 0s}\n"))
	require.ErrorContains(t, err, "rescheduler.backoffMax")
	require.ErrorContains(t, err, "rescheduler.nodeLostGrace")
}

// TestGPUDefaultForAndRequireDurable: gpu.defaultFor is an enum defaulting
// to AcceleratorJobs; it and checkpoint.requireDurable reach the policy.
func TestGPUDefaultForAndRequireDurable(t *testing.T) {
	cfg, _, err := Parse([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\n"))
	require.NoError(t, err)
	assert.Equal(t, GPUDefaultForAcceleratorJobs, cfg.GPU.DefaultFor)
	p, _ := Resolve(cfg, nil, nil)
	assert.False(t, p.GPUForAll)
	assert.False(t, p.RequireDurableCheckpoints)

	cfg, _, err = Parse([]byte("apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\ngpu: {defaultFor: AllJobs}\ncheckpoint: {requireDurable: true}\n"))
	require.NoError(t, err)
	p, _ = Resolve(cfg, map[string]string{"trainguard.io/require-durable-checkpoints": "false"}, nil)
	assert.True(t, p.GPUForAll)
	assert.True(t, p.RequireDurableCheckpoints, "an annotation can only tighten it")

	p, _ = Resolve(DefaultConfig(), nil, map[string]string{"trainguard.io/gpu-limit": "2"})
	assert.True(t, p.GPUForAll, "an explicit gpu-limit asks for the default on CPU jobs too")

	_, _, err = Parse([]byte("gpu: {defaultFor: everything}\n"))
	require.ErrorContains(t, err, `gpu.defaultFor: Unsupported value: "everything": supported values: "AcceleratorJobs", "AllJobs"`)
}
