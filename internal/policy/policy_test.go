package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestResolveLayersConfigNamespaceObject(t *testing.T) {
	cfg, err := ParseConfig([]byte("checkpoint: {claim: from-config, preStopTimeout: 30s}\ngpu: {defaultCount: 2}\n"))
	require.NoError(t, err)
	ns := map[string]string{AnnotationCheckpointClaim: "from-namespace", AnnotationGPULimit: "4", AnnotationTaskD: "disabled"}
	obj := map[string]string{AnnotationCheckpointClaim: "from-object", AnnotationPreStopTimeout: "2m"}
	p, warnings := Resolve(cfg, ns, obj)
	assert.Empty(t, warnings)
	assert.Equal(t, "from-object", p.CheckpointClaim, "object beats namespace")
	assert.Equal(t, int64(4), p.GPUCount, "namespace beats config")
	assert.Equal(t, 2*time.Minute, p.PreStopTimeout)
	assert.False(t, p.TaskD)
	assert.Equal(t, "/checkpoint", p.CheckpointPath, "config default")
}

func TestResolveBadValueWarnsAndKeepsLowerLayer(t *testing.T) {
	p, warnings := Resolve(DefaultConfig(), map[string]string{AnnotationGPULimit: "3"}, map[string]string{AnnotationGPULimit: "lots"})
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

func TestAnnotationRules(t *testing.T) {
	cases := []struct {
		key, good, bad string
	}{
		{AnnotationRecoverStrategy, "recover,dump", "recover,,dump"},
		{AnnotationRecoverStrategy, "elastic-training", "recover,recover"},
		{AnnotationRecoverStrategy, "exit", "recover, dump"},
		{AnnotationMindClusterRecoverStrategy, "recover-in-place", "migrate"},
		{AnnotationFaultScheduling, "force", "later"},
		{AnnotationCheckpointClaim, "ckpt-pvc.v2", "Ckpt_PVC"},
		{AnnotationCheckpointPath, "/mnt/ckpt", "mnt/ckpt"},
		{AnnotationCheckpointPath, "/checkpoint", "/checkpoint/../etc"},
		{AnnotationCheckpointPath, "/data", "/"},
		{AnnotationCheckpointPath, "/srv/proc", "/proc/self"},
		{AnnotationCheckpointPath, "/var/run/ckpt", "/var/run/secrets/kubernetes.io"},
		{AnnotationCheckpointPath, "/run/ckpt", "/run/secrets/x"},
		{AnnotationPreStopTimeout, "1h", "61m"},
		{AnnotationPreStopTimeout, "90s", "0s"},
		{AnnotationGPULimit, "0", "65"},
		{AnnotationGPULimit, "64", "+5"},
		{AnnotationTaskD, "enabled", "on"},
		{AnnotationInject, "disabled", "yes"},
		{AnnotationMaxReschedules, "0", "-1"},
	}
	for _, tc := range cases {
		t.Run(tc.key+"="+tc.bad, func(t *testing.T) {
			path := field.NewPath("metadata", "annotations")
			assert.Empty(t, ValidateAnnotations(map[string]string{tc.key: tc.good}, path), "%q is valid", tc.good)
			errs := ValidateAnnotations(map[string]string{tc.key: tc.bad}, path)
			require.Len(t, errs, 1, "%q is invalid", tc.bad)
			assert.Equal(t, "metadata.annotations["+tc.key+"]", errs[0].Field)
		})
	}
}

func TestFormatDuration(t *testing.T) {
	assert.Equal(t, "60s", FormatDuration(time.Minute))
	assert.Equal(t, "1.5s", FormatDuration(1500*time.Millisecond))
}

// TestConfigReferenceShowsTheDefaults keeps docs/config-reference.yaml (in
// the README) honest: it must load strictly and equal the built-in defaults.
func TestConfigReferenceShowsTheDefaults(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join("..", "..", "docs", "config-reference.yaml"))
	require.NoError(t, err)
	want := DefaultConfig()
	want.Mutators = map[string]bool{}
	assert.Equal(t, want, cfg)
}
