package webhook

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// TestUnknownFieldsSurvive mutates a PyTorchJob full of fields the local
// types do not declare and checks each of them comes back byte for byte.
func TestUnknownFieldsSurvive(t *testing.T) {
	raw := []byte(`{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"j","namespace":"team-a"},
"spec":{"runPolicy":{"cleanPodPolicy":"None","schedulingPolicy":{"queue":"q","minAvailable":2,"priorityClass":"high"}},
"someFutureField":{"nested":[1,2.5,"x",null,{"deep":true}]},
"pytorchReplicaSpecs":{"Worker":{"replicas":1,"futureReplicaField":"keep-me",
"template":{"spec":{"futurePodField":true,"containers":[{"name":"pytorch","image":"i","futureContainerField":{"a":"b"}}]}}}}},
"status":{"conditions":[{"type":"Created","status":"True"}],"replicaStatuses":{"Worker":{"active":1}}}}`)
	inj := &Injector{Scope: policy.Scope{Config: configv1alpha1.Default()}}
	res, err := inj.Inject(context.Background(), Request{GVK: jobs.KubeflowPyTorchJob().GVK, Namespace: "team-a", Raw: raw, OptedIn: true, NamespaceAnnotations: map[string]string{}})
	require.NoError(t, err)
	require.NotEmpty(t, res.Patch)
	out, err := admissionio.ApplyPatch(raw, res.Patch)
	require.NoError(t, err)

	for _, path := range [][]string{
		{"spec", "runPolicy"},
		{"spec", "someFutureField"},
		{"spec", "pytorchReplicaSpecs", "Worker", "futureReplicaField"},
		{"spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "futurePodField"},
		{"status"},
	} {
		assert.JSONEq(t, subtree(t, raw, path), subtree(t, out, path), "field %v must survive untouched", path)
	}
	var job map[string]any
	require.NoError(t, json.Unmarshal(out, &job))
	c := job["spec"].(map[string]any)["pytorchReplicaSpecs"].(map[string]any)["Worker"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"a": "b"}, c["futureContainerField"])
	assert.NotNil(t, c["lifecycle"], "the injection itself must have happened")
}

func subtree(t *testing.T, doc []byte, path []string) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(doc, &v))
	for _, p := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "path %v", path)
		v, ok = m[p]
		require.True(t, ok, "path %v missing", path)
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestPatchOnlyTouchesWhatChanged checks the patch never replaces a whole
// replica spec or template (which would drop unknown fields on the server).
func TestPatchOnlyTouchesWhatChanged(t *testing.T) {
	in, err := yaml.YAMLToJSON([]byte(`apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: j, namespace: team-a}
spec:
  pytorchReplicaSpecs:
    Worker:
      template:
        spec:
          containers: [{name: pytorch, image: i}]`))
	require.NoError(t, err)
	inj := &Injector{Scope: policy.Scope{Config: configv1alpha1.Default()}}
	res, err := inj.Inject(context.Background(), Request{GVK: jobs.KubeflowPyTorchJob().GVK, Raw: in, OptedIn: true, NamespaceAnnotations: map[string]string{}})
	require.NoError(t, err)
	for _, op := range res.Patch {
		assert.NotEqual(t, "/spec", op.Path)
		assert.NotEqual(t, "/spec/pytorchReplicaSpecs/Worker", op.Path)
		assert.NotEqual(t, "/spec/pytorchReplicaSpecs/Worker/template/spec", op.Path)
	}
}
