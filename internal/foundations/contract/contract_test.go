package contract

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

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

// TestOverlayAndValidateShareOneTable: a value the validator refuses is
// never applied, and one it accepts always is.
func TestOverlayAndValidateShareOneTable(t *testing.T) {
	for _, r := range annotationTable() {
		if r.checkOnly {
			continue
		}
		p := &Policy{}
		before := *p
		warnings := p.Overlay("object", map[string]string{r.key: "\x00bad"})
		assert.Len(t, warnings, 1, r.key)
		assert.Equal(t, before, *p, "%s: a refused value changes nothing", r.key)
		assert.NotEmpty(t, ValidateAnnotations(map[string]string{r.key: "\x00bad"}, field.NewPath("a")), r.key)
	}
	p := &Policy{}
	assert.Empty(t, p.Overlay("object", map[string]string{AnnotationGPULimit: "3", AnnotationInject: "bogus", "other.io/x": "y"}),
		"the opt-in switch is validated, not layered, and foreign keys are ignored")
	assert.Equal(t, int64(3), p.GPUCount)
}

func TestPolicyAnnotations(t *testing.T) {
	assert.Equal(t, []string{AnnotationCheckpointClaim, AnnotationGPULimit},
		PolicyAnnotations(map[string]string{AnnotationGPULimit: "1", AnnotationCheckpointClaim: "c", AnnotationInject: "enabled", "recover-strategy": "dump"}))
	assert.Empty(t, PolicyAnnotations(map[string]string{AnnotationInject: "enabled"}))
}

func TestPredicates(t *testing.T) {
	assert.True(t, NamespaceEnabled(false, map[string]string{AnnotationInject: InjectEnabled}))
	assert.False(t, NamespaceEnabled(true, map[string]string{AnnotationInject: InjectDisabled}))
	assert.True(t, NamespaceEnabled(true, nil))
	assert.False(t, NamespaceEnabled(false, nil))
	assert.True(t, OptedOut(map[string]string{AnnotationInject: InjectDisabled}))
	assert.True(t, OptedIn(map[string]string{AnnotationInject: InjectEnabled}))
	assert.True(t, Injected(map[string]string{AnnotationInjected: ""}))
	assert.False(t, Injected(nil))

	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar"}, {Name: "ascend"}, {Name: "pytorch"}}}
	assert.Equal(t, 2, TrainingContainer(spec, []string{"pytorch", "ascend"}), "list order wins over container order")
	assert.Equal(t, 0, TrainingContainer(spec, []string{"trainer"}), "first container is the fallback")
	assert.False(t, HasNamedTrainingContainer(spec, []string{"trainer"}))
	assert.Equal(t, -1, TrainingContainer(&corev1.PodSpec{}, nil))
	require.Equal(t, -1, TrainingContainer(nil, nil))
}

var _ = time.Second
