package crdfields

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/typecheck"
)

var pytorchJob = schema.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}

// TestEmbeddedSchemasAreFresh: the embedded files are what the generator
// extracts from the pinned CRDs today (go generate ./internal/foundations/crdfields/).
func TestEmbeddedSchemasAreFresh(t *testing.T) {
	dir := t.TempDir()
	gen := exec.Command("go", "run", "../../../hack/gen-crd-fields", "-o", dir)
	out, err := gen.CombinedOutput()
	require.NoError(t, err, "%s", out)
	generated, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	embeddedNames, err := fs.Glob(files, "*.json")
	require.NoError(t, err)
	require.Len(t, embeddedNames, len(generated), "embedded files: %v", embeddedNames)
	require.Len(t, generated, 1+3*len(TrainerReleases), "PyTorchJob, and Trainer's three kinds per release")
	for _, path := range generated {
		fresh, err := os.ReadFile(path)
		require.NoError(t, err)
		embedded, err := files.ReadFile(filepath.Base(path))
		require.NoError(t, err, "generated but not embedded")
		assert.Equal(t, string(fresh), string(embedded), "%s stale; run: go generate ./internal/foundations/crdfields/", filepath.Base(path))
	}
}

// TestCheckRefusesWhatStrictFieldValidationRefuses: fields the CRD does
// not declare, anywhere, and values of the wrong JSON type; declared
// fields trainguard never reads pass.
func TestCheckRefusesWhatStrictFieldValidationRefuses(t *testing.T) {
	node, ok, err := For(pytorchJob)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = For(schema.GroupVersionKind{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"})
	require.NoError(t, err)
	assert.False(t, ok, "KubeDL's CRD is trainguard's own minimal one: nothing embedded")

	doc := `{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"x","anything":1},
	  "spec":{"runPolicy":{"backoffLimt":3,"cleanPodPolicy":"None","suspend":"yes"},
	   "pytorchReplicaSpecs":{"Worker":{"replicas":2,"template":{"metadata":{"labels":{"a":"b"},"generateName":"w-"},
	     "spec":{"containers":[{"name":"pytorch","image":"i","imagee":"j"}]}}}}}}`
	v, err := typecheck.DecodeJSON([]byte(doc))
	require.NoError(t, err)
	got := Check(v.(map[string]any), node)
	assert.Equal(t, []string{
		`spec.pytorchReplicaSpecs[Worker].template.metadata.generateName: unknown field "generateName"`,
		`spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].imagee: unknown field "imagee"; did you mean "image"?`,
		`spec.runPolicy.backoffLimt: unknown field "backoffLimt"; did you mean "backoffLimit"?`,
		`spec.runPolicy.suspend: Invalid value: "yes": must be of type boolean`,
	}, got)
}

// TestCheckRefusesValuesOutsideTheSchema: enum, minimum, maximum,
// maxLength, maxItems and required, in the API server's words.
// training-operator v1.9.4's PyTorchJob CRD declares no enum or bound
// (cleanPodPolicy: Sometimes and backoffLimit: -1 are admitted by the API
// server), so the schema here is written out; Trainer's CRDs use them.
func TestCheckRefusesValuesOutsideTheSchema(t *testing.T) {
	one, hundred := json.Number("1"), json.Number("100")
	two := int64(2)
	root := &Node{Type: "object", Props: map[string]*Node{"spec": {
		Type:     "object",
		Required: []string{"runtimeRef"},
		Props: map[string]*Node{
			"policy":     {Type: "string", Enum: []any{"All", "None"}},
			"deadline":   {Type: "integer", Minimum: &one},
			"percent":    {Type: "integer", Maximum: &hundred},
			"image":      {Type: "string", MaxLength: &two},
			"args":       {Type: "array", MaxItems: &two, Items: &Node{Type: "string"}},
			"runtimeRef": {Type: "object"},
		},
	}}}
	v, err := typecheck.DecodeJSON([]byte(`{"spec":{"policy":"Sometimes","deadline":0,"percent":101,"image":"abc","args":["a","b","c"]}}`))
	require.NoError(t, err)
	assert.Equal(t, []string{
		`spec.runtimeRef: Required value`,
		`spec.args: Too many: 3: must have at most 2 items`,
		`spec.deadline: Invalid value: 0: spec.deadline in body should be greater than or equal to 1`,
		`spec.image: Too long: may not be more than 2 bytes`,
		`spec.percent: Invalid value: 101: spec.percent in body should be less than or equal to 100`,
		`spec.policy: Unsupported value: "Sometimes": supported values: "All", "None"`,
	}, Check(v.(map[string]any), root))
	v, err = typecheck.DecodeJSON([]byte(`{"spec":{"runtimeRef":{},"policy":"None","deadline":1,"percent":100,"image":"ab","args":["a"]}}`))
	require.NoError(t, err)
	assert.Empty(t, Check(v.(map[string]any), root), "values on the bounds pass")
}
