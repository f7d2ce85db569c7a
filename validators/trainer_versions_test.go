package validators

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"sigs.k8s.io/yaml"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

func versionWarnings(t *testing.T, kind, doc string) []string {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return TrainerVersionWarnings(trainerv1alpha1.GroupVersion.WithKind(kind), raw)
}

// TestTrainerVersionWarnings: each field only some Trainer releases have
// gets one warning naming its path and the release that changed it; the
// v2.2+ shapes get none.
func TestTrainerVersionWarnings(t *testing.T) {
	v20Runtime := `spec:
  mlPolicy:
    torch:
      numProcPerNode: auto
      elasticPolicy: {minNodes: 1, maxNodes: 2}
`
	for _, kind := range []string{trainerv1alpha1.TrainingRuntimeKind, trainerv1alpha1.ClusterTrainingRuntimeKind} {
		w := versionWarnings(t, kind, v20Runtime)
		if assert.Len(t, w, 2, kind) {
			assert.True(t, strings.HasPrefix(w[0], "spec.mlPolicy.torch.numProcPerNode: Kubeflow Trainer v2.2+ removed this field"), w[0])
			assert.True(t, strings.HasPrefix(w[1], "spec.mlPolicy.torch.elasticPolicy: Kubeflow Trainer v2.2+ removed this field"), w[1])
			assert.Contains(t, w[1], "rejects it under strict field validation")
			assert.Contains(t, w[1], "silently drops it")
		}
	}
	assert.Len(t, versionWarnings(t, trainerv1alpha1.TrainingRuntimeKind, "spec:\n  mlPolicy:\n    torch:\n      elasticPolicy: {}\n"), 1, "an empty elasticPolicy is still the field")
	assert.Empty(t, versionWarnings(t, trainerv1alpha1.TrainingRuntimeKind, "spec:\n  mlPolicy: {numNodes: 2, torch: {}}\n"), "the v2.2+ shape")
	assert.Empty(t, versionWarnings(t, trainerv1alpha1.TrainingRuntimeKind, "spec:\n  mlPolicy: {mpi: {numProcPerNode: 2}}\n"), "mpi.numProcPerNode is in every release")

	w := versionWarnings(t, trainerv1alpha1.TrainJobKind, `spec:
  trainer: {numProcPerNode: auto}
  podSpecOverrides: [{targetJobs: [{name: node}]}]
`)
	if assert.Len(t, w, 2) {
		assert.True(t, strings.HasPrefix(w[0], "spec.podSpecOverrides: exists only in Kubeflow Trainer v2.0"), w[0])
		assert.True(t, strings.HasPrefix(w[1], "spec.trainer.numProcPerNode: Kubeflow Trainer v2.2+ takes only an integer"), w[1])
	}
	assert.Empty(t, versionWarnings(t, trainerv1alpha1.TrainJobKind, "spec:\n  trainer: {numProcPerNode: 4}\n"), "an integer is valid in every release")
	assert.Empty(t, TrainerVersionWarnings(trainerv1alpha1.GroupVersion.WithKind("Other"), []byte(`{"spec":{"mlPolicy":{"torch":{"elasticPolicy":{}}}}}`)))
	assert.Empty(t, versionWarnings(t, trainerv1alpha1.TrainingRuntimeKind, "spec: 3\n"), "undecodable: Validate reports it")
}

// TestTorchTuneWithoutNumNodesWarns: a torchtune TrainJob with
// numProcPerNode and no numNodes is valid on Trainer v2.3.0 (1 node) and
// broke v2.0's and v2.1's webhooks: a warning naming the field, not an error.
func TestTorchTuneWithoutNumNodesWarns(t *testing.T) {
	raw, err := yaml.YAMLToJSON([]byte(`apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tune, namespace: default}
spec:
  runtimeRef: {name: torchtune-llama3.2-1b}
  trainer: {numProcPerNode: 1, command: [tune, run]}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := New(nil).Validate(Object{GVK: trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind), Raw: raw})
	if err != nil {
		t.Fatal(err)
	}
	assert.Empty(t, res.Errors)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "spec.trainer.numNodes: not set; Trainer v2.0 and v2.1's webhooks fail")
}
