package admissionio_test

import (
	"encoding/json"
	"testing"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/mutators"
)

// diffSeeds are pods with fields the Go types do not declare, at the
// levels the mutators touch.
func diffSeeds() []string {
	return []string{
		`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"pytorch","image":"i","resources":{"futureField":{"a":1}}}]}}`,
		`{"metadata":{"name":"p","futureMeta":1},"spec":{"futureSpec":[1,2],"containers":[{"name":"pytorch","image":"i","futureContainer":"x","lifecycle":{"futureLifecycle":true}}]}}`,
		`{"metadata":{"name":"p","labels":{"a":"b"}},"spec":{"containers":[{"name":"side","image":"s"},{"name":"pytorch","image":"i","resources":{"limits":{"cpu":"1"},"futureField":0}}],"volumes":[{"name":"v","futureVolume":{},"emptyDir":{}}]}}`,
		`{"spec":{"containers":[{"name":"pytorch","resources":{"futureField":null}}],"securityContext":{"futurePod":"y"}}}`,
	}
}

// FuzzTypedDiffAgainstCreatePatch checks the differ against
// gomodules.xyz/jsonpatch's CreatePatch, which diffs the whole JSON and
// is obviously right about the known fields but knows nothing of raw.
// Both patches are applied to the raw object (the oracle's to raw with
// the typed defaults filled in, so its paths exist); the results must
// agree, unknown fields included.
func FuzzTypedDiffAgainstCreatePatch(f *testing.F) {
	for _, s := range diffSeeds() {
		for mode := range uint8(3) {
			f.Add([]byte(s), mode)
		}
	}
	cfg := configv1alpha1.Default()
	f.Fuzz(func(t *testing.T, raw []byte, mode uint8) {
		var tree map[string]any
		var before corev1.Pod
		if json.Unmarshal(raw, &tree) != nil || jobs.Decode(raw, &before) != nil {
			return
		}
		after := before.DeepCopy()
		mutate(cfg, after, mode)
		ops, err := admissionio.TypedDiff(&admissionio.TypeCache{}, raw, &before, after)
		require.NoError(t, err)
		got, err := admissionio.ApplyPatch(raw, ops)
		require.NoError(t, err, "the typed patch must apply to raw: %v", ops)

		oracle, base := oraclePatch(t, tree, &before, after)
		want, err := admissionio.ApplyPatch(base, oracle)
		require.NoError(t, err, "the oracle's patch applies to raw with typed defaults: %v", oracle)
		assert.JSONEq(t, normalized(t, want), normalized(t, got), "typed ops %v\noracle ops %v", ops, oracle)
	})
}

// mutate applies the injection chain, a removal, or both.
func mutate(cfg *configv1alpha1.Configuration, pod *corev1.Pod, mode uint8) {
	if mode%3 != 1 {
		p, _ := policy.Resolve(cfg, nil, nil)
		// Asked for explicitly, so any pod with a container is injected.
		metav1.SetMetaDataAnnotation(&pod.ObjectMeta, contract.AnnotationInject, contract.InjectEnabled)
		_, _, _ = mutators.MutatePod(mutators.PodRequest{Pod: pod, Policy: p})
	}
	if mode%3 != 0 {
		pod.Labels = nil
		for i := range pod.Spec.Containers {
			pod.Spec.Containers[i].Args = nil
		}
	}
}

// oraclePatch returns CreatePatch(before, after) and the document to apply
// it to: raw merged over the JSON of before, so every member the typed
// JSON has exists and every unknown member of raw is there too.
func oraclePatch(t *testing.T, raw map[string]any, before, after *corev1.Pod) ([]jsonpatch.Operation, []byte) {
	t.Helper()
	b, err := json.Marshal(before)
	require.NoError(t, err)
	a, err := json.Marshal(after)
	require.NoError(t, err)
	ops, err := jsonpatch.CreatePatch(b, a)
	require.NoError(t, err)
	var typed any
	require.NoError(t, json.Unmarshal(b, &typed))
	base, err := json.Marshal(merge(typed, raw))
	require.NoError(t, err)
	return ops, base
}

// merge overlays over onto under: objects member by member, anything
// else (arrays of another length, scalars) taken from over. Of what only
// under has, just the objects are kept (the parents the oracle's paths
// need), never the typed zero values ("name": "") raw does not have.
func merge(under, over any) any {
	switch o := over.(type) {
	case map[string]any:
		u, ok := under.(map[string]any)
		if !ok {
			return o
		}
		out := map[string]any{}
		for k, v := range u {
			if obj, isObj := skeleton(v).(map[string]any); isObj {
				out[k] = obj
			}
		}
		for k, v := range o {
			out[k] = merge(u[k], v)
		}
		return out
	case []any:
		u, ok := under.([]any)
		if !ok || len(u) != len(o) {
			return o
		}
		out := make([]any, len(o))
		for i := range o {
			out[i] = merge(u[i], o[i])
		}
		return out
	}
	return over
}

// skeleton is the objects of v without any scalar or array; nil for a non-object.
func skeleton(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := map[string]any{}
	for k, e := range m {
		if obj, isObj := skeleton(e).(map[string]any); isObj {
			out[k] = obj
		}
	}
	return out
}

// normalized drops nulls and empty objects and arrays, which JSON's typed
// and raw forms spell differently for the same object.
func normalized(t *testing.T, doc []byte) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(doc, &v))
	out, err := json.Marshal(dropEmpty(v))
	require.NoError(t, err)
	return string(out)
}

func dropEmpty(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range t {
			if e = dropEmpty(e); e != nil {
				out[k] = e
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		out := make([]any, 0, len(t))
		for _, e := range t {
			out = append(out, dropEmpty(e))
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return v
}

// TestTypedDiffKeepsUnknownFieldsOfAZeroStruct is the case the differ
// used to get wrong: resources holding only an unknown field, plus the GPU
// default, replaced the whole resources and lost the field.
func TestTypedDiffKeepsUnknownFieldsOfAZeroStruct(t *testing.T) {
	raw := diffSeeds()[0]
	cfg := configv1alpha1.Default()
	cfg.GPU.DefaultFor = configv1alpha1.GPUDefaultForAllJobs // the seed is a CPU pod
	got := roundTripJSON(t, raw, func(p *corev1.Pod) { mutate(cfg, p, 0) })
	assert.Contains(t, got, `"futureField":{"a":1}`)
	assert.Contains(t, got, `"nvidia.com/gpu":"1"`)
}

func TestTypedDiffRefusesNonStringMapKeys(t *testing.T) {
	type odd struct {
		M map[int]string `json:"m"`
	}
	_, err := admissionio.TypedDiff(&admissionio.TypeCache{}, nil, &odd{M: map[int]string{1: "a"}}, &odd{M: map[int]string{1: "b"}})
	require.ErrorContains(t, err, "/m: map key type int is not a string")
}

// roundTripJSON applies TypedDiff(before, after) to raw, as the API server would.
func roundTripJSON(t *testing.T, raw string, mutate func(*corev1.Pod)) string {
	t.Helper()
	var before corev1.Pod
	require.NoError(t, jobs.Decode([]byte(raw), &before))
	after := before.DeepCopy()
	mutate(after)
	ops, err := admissionio.TypedDiff(&admissionio.TypeCache{}, []byte(raw), &before, after)
	require.NoError(t, err)
	out, err := admissionio.ApplyPatch([]byte(raw), ops)
	require.NoError(t, err, "ops %v", ops)
	return string(out)
}
