package admissionio_test

import (
	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/testing/builders"

	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// roundTrip applies TypedDiff(before, after) to raw and decodes the result.
func roundTrip(t *testing.T, raw string, mutate func(*corev1.Pod)) corev1.Pod {
	t.Helper()
	var got corev1.Pod
	require.NoError(t, json.Unmarshal([]byte(roundTripJSON(t, raw, mutate)), &got))
	return got
}

func TestTypedDiffCases(t *testing.T) {
	raw := `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"a","image":"i","args":["x","y","z"],"resources":{"limits":{"cpu":"1000m"}}}]}}`
	cases := map[string]func(*corev1.Pod){
		"add labels where metadata has none": func(p *corev1.Pod) { p.Labels = map[string]string{"k": "v"} },
		"replace an array element":           func(p *corev1.Pod) { p.Spec.Containers[0].Args[1] = "Y" },
		"shrink an array":                    func(p *corev1.Pod) { p.Spec.Containers[0].Args = p.Spec.Containers[0].Args[:1] },
		"grow an array":                      func(p *corev1.Pod) { p.Spec.Containers[0].Args = append(p.Spec.Containers[0].Args, "w") },
		"remove a pointer member":            func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Limits = nil },
		"add a nested struct": func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: builders.Ptr(true)}
		},
		"change a quantity": func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2")
		},
		"add to a zero struct": func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"memory": resource.MustParse("1Gi")}
		},
		"object meta whole": func(p *corev1.Pod) {
			p.ObjectMeta = metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"a": "b"}}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			var want corev1.Pod
			require.NoError(t, jobs.Decode([]byte(raw), &want))
			mutate(&want)
			got := roundTrip(t, raw, mutate)
			assert.Equal(t, mustJSONOf(t, &want), mustJSONOf(t, &got))
		})
	}
}

func TestTypedDiffUnchangedIsEmpty(t *testing.T) {
	var p corev1.Pod
	require.NoError(t, jobs.Decode([]byte(`{"spec":{"containers":[{"name":"a","resources":{"limits":{"cpu":"1"}}}]}}`), &p))
	ops, err := admissionio.TypedDiff(&admissionio.TypeCache{}, nil, p.DeepCopy(), &p)
	require.NoError(t, err)
	assert.Empty(t, ops)
}

func mustJSONOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestJoinPointerEscapes(t *testing.T) {
	assert.Equal(t, "/metadata/annotations/trainguard.io~1injected", admissionio.JoinPointer([]string{"metadata", "annotations", "trainguard.io/injected"}))
	assert.Equal(t, "/a~0b~1c", admissionio.JoinPointer([]string{"a~b/c"}))
	assert.Equal(t, "", admissionio.JoinPointer(nil))
}
