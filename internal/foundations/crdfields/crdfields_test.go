package crdfields

import (
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
	fresh, err := os.ReadFile(filepath.Join(dir, FileName(pytorchJob)))
	require.NoError(t, err)
	embedded, err := files.ReadFile(FileName(pytorchJob))
	require.NoError(t, err)
	assert.Equal(t, string(fresh), string(embedded), "stale; run: go generate ./internal/foundations/crdfields/")
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
