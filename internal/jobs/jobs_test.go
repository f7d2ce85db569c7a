package jobs

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestKindsDispatchByGVK(t *testing.T) {
	k := Builtin()
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
		{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"},
		{Version: "v1", Kind: "Pod"},
	} {
		a, ok := k.For(gvk)
		require.True(t, ok, gvk.String())
		assert.Equal(t, gvk, a.GVK)
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "kubeflow.org", Version: "v2", Kind: "PyTorchJob"},
		{Group: "kubeflow.org", Version: "v1", Kind: "TFJob"},
		{Version: "v1", Kind: "Namespace"},
	} {
		_, ok := k.For(gvk)
		assert.False(t, ok, gvk.String())
	}
	assert.Len(t, k.With(Pod()).All(), len(k.All())+1)
	assert.Len(t, k.All(), 7, "With returns a new set and leaves the original alone")
}

func TestTemplatesAreSortedAndSkipNil(t *testing.T) {
	job, err := KubeflowPyTorchJob().Decode([]byte(`{"spec":{"pytorchReplicaSpecs":{"Worker":{"template":{}},"Master":{"template":{}},"Chief":null}}}`))
	require.NoError(t, err)
	var where []string
	for _, tpl := range job.Templates() {
		where = append(where, tpl.Where())
	}
	assert.Equal(t, []string{"spec.pytorchReplicaSpecs[Master].template", "spec.pytorchReplicaSpecs[Worker].template"}, where)
	assert.Equal(t, "spec.pytorchReplicaSpecs[Master].template.spec", job.Templates()[0].SpecPath().String())
}

func TestElasticInEachVocabulary(t *testing.T) {
	kf, err := KubeflowPyTorchJob().Decode([]byte(`{"spec":{"nprocPerNode":"4","elasticPolicy":{},"pytorchReplicaSpecs":{"Worker":{}}}}`))
	require.NoError(t, err)
	e := kf.Elastic()
	assert.True(t, e.Enabled)
	assert.Equal(t, int64(4), e.NprocPerNode)
	assert.NotNil(t, e.Workers)
	dl, err := KubeDLPyTorchJob().Decode([]byte(`{"spec":{"elasticPolicy":{"nProcPerNode":2}}}`))
	require.NoError(t, err)
	assert.False(t, dl.Elastic().Enabled, "KubeDL scales only with enableElastic")
	assert.Equal(t, int64(2), dl.Elastic().NprocPerNode)
	pod, err := Pod().Decode([]byte(`{"metadata":{"name":"p"}}`))
	require.NoError(t, err)
	assert.Nil(t, pod.Elastic().Path, "a pod has no elastic policy")
	assert.Len(t, pod.Templates(), 1)
}

func TestDecodeIsCaseSensitiveAndNamesTheKind(t *testing.T) {
	job, err := KubeflowPyTorchJob().Decode([]byte(`{"Metadata":{"name":"x"}}`))
	require.NoError(t, err)
	assert.Empty(t, job.Meta().Name, "Metadata is not metadata")
	_, err = KubeflowPyTorchJob().Decode([]byte(`{"spec":[]}`))
	require.ErrorContains(t, err, "decoding kubeflow.org/v1 PyTorchJob")
	_, err = Pod().Decode(nil)
	require.ErrorContains(t, err, "v1 Pod: empty object")
}

func TestListItemsRoundTrip(t *testing.T) {
	raw := []byte(`{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"7"},"items":[{"a":1},{"b":2}]}`)
	var h Header
	require.NoError(t, json.Unmarshal(raw, &h))
	require.True(t, h.IsList())
	items, err := ListItems(raw)
	require.NoError(t, err)
	require.Len(t, items, 2)
	items[1] = json.RawMessage(`{"b":3}`)
	out, err := ReplaceListItems(raw, items)
	require.NoError(t, err)
	assert.JSONEq(t, `{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"7"},"items":[{"a":1},{"b":3}]}`, string(out))
}

// TestEmptyReplicaKeyIsRefusedWithItsFieldPath: a replica type "" (found by
// FuzzInjectObject) would make every patch path under it
// /spec/pytorchReplicaSpecs//..., which the API server refuses with an
// error naming neither the field nor the fix.
func TestEmptyReplicaKeyIsRefusedWithItsFieldPath(t *testing.T) {
	for _, a := range []*Adapter{KubeflowPyTorchJob(), KubeDLPyTorchJob()} {
		for key, want := range map[string]string{
			"":                      `spec.pytorchReplicaSpecs[]: Invalid value: "": the replica type is empty; name it Master or Worker`,
			"Wor ker":               `spec.pytorchReplicaSpecs[Wor ker]: Invalid value: "Wor ker": the replica type must be usable as a label value`,
			strings.Repeat("w", 64): "must be usable as a label value",
		} {
			raw := fmt.Sprintf(`{"apiVersion":%q,"kind":"PyTorchJob","metadata":{"name":"j"},"spec":{"pytorchReplicaSpecs":{%q:{"replicas":1,"template":{"spec":{"containers":[{"name":"pytorch","image":"x"}]}}}}}}`,
				a.GVK.GroupVersion().String(), key)
			_, err := a.Decode([]byte(raw))
			require.Error(t, err, "%s key %q", a.Name, key)
			assert.Contains(t, err.Error(), want)
		}
		ok := fmt.Sprintf(`{"apiVersion":%q,"kind":"PyTorchJob","metadata":{"name":"j"},"spec":{"pytorchReplicaSpecs":{"Master":{"replicas":1},"Worker":{"replicas":2}}}}`,
			a.GVK.GroupVersion().String())
		_, err := a.Decode([]byte(ok))
		assert.NoError(t, err, a.Name)
	}
}
