package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestValidateCLIAcceptsTrainerRuntimes validates every runtime Kubeflow
// Trainer v2.0.0 and v2.3.0 ship (manifests/base/runtimes, read from the
// module cache): what Trainer installs as working must pass, whichever
// release's API it is written for. v2.0.0's torch runtimes set
// mlPolicy.torch.numProcPerNode, which v2.2 removed: a warning, not an error.
func TestValidateCLIAcceptsTrainerRuntimes(t *testing.T) {
	for _, version := range []string{"v2.0.0", "v2.3.0"} {
		dir := kubeflowModuleDir(t, "github.com/kubeflow/trainer/v2@"+version)
		var files []string
		require.NoError(t, filepath.WalkDir(filepath.Join(dir, "manifests", "base", "runtimes"), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && filepath.Ext(path) == ".yaml" && filepath.Base(path) != "kustomization.yaml" {
				files = append(files, path)
			}
			return err
		}))
		require.GreaterOrEqual(t, len(files), 6, "runtimes found: %v", files)
		for _, f := range files {
			rel, _ := filepath.Rel(dir, f)
			t.Run(version+"/"+rel, func(t *testing.T) {
				res := runCLI(t, "", "validate", "-f", f)
				assert.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
				assert.Empty(t, res.stdout)
				if version != "v2.0.0" {
					assert.NotContains(t, res.stderr, "v2.2+", "a v2.3.0 runtime uses no field v2.2 removed")
				}
			})
		}
	}
}

// TestValidateCLIWarnsOfFieldsTrainerRemoved: offline the cluster's Trainer
// is unknown, so a runtime using mlPolicy.torch.elasticPolicy or
// numProcPerNode is still checked (v2.0's rules) and valid, and each field
// gets a warning on stderr naming its path and that v2.2+ removed it.
func TestValidateCLIWarnsOfFieldsTrainerRemoved(t *testing.T) {
	in := `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: elastic}
spec:
  mlPolicy:
    torch:
      numProcPerNode: 4
      elasticPolicy: {minNodes: 1, maxNodes: 4}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                spec:
                  containers: [{name: node, image: example.com/x:1}]
`
	res := runCLI(t, in, "validate", "-f", "-")
	require.Equal(t, 0, res.code, "valid under the v2.0 API: stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	assert.Empty(t, res.stdout)
	assert.Contains(t, res.stderr, "ClusterTrainingRuntime/elastic: warning: spec.mlPolicy.torch.elasticPolicy: Kubeflow Trainer v2.2+ removed this field (a cluster serving v2.2 or newer rejects it")
	assert.Contains(t, res.stderr, "ClusterTrainingRuntime/elastic: warning: spec.mlPolicy.torch.numProcPerNode: Kubeflow Trainer v2.2+ removed this field")

	// The v2.0 rules still apply: a broken elastic range is an error, and warned about.
	bad := strings.Replace(in, "{minNodes: 1, maxNodes: 4}", "{minNodes: 4, maxNodes: 1}", 1)
	res = runCLI(t, bad, "validate", "-f", "-")
	require.Equal(t, 1, res.code, res.stderr)
	assert.Contains(t, res.stdout, "ClusterTrainingRuntime/elastic: spec.mlPolicy.torch.elasticPolicy.maxNodes: Invalid value: 1")
	assert.Contains(t, res.stderr, "spec.mlPolicy.torch.elasticPolicy: Kubeflow Trainer v2.2+ removed this field")
}

// TestValidateCLITrainJobAgainstItsRuntime: a TrainJob is checked against
// the runtime in the same input; a runtime not in the input is a warning.
func TestValidateCLITrainJobAgainstItsRuntime(t *testing.T) {
	in := `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: elastic, namespace: ml}
spec:
  mlPolicy:
    torch:
      elasticPolicy: {minNodes: 2, maxNodes: 4}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                spec:
                  containers: [{name: node, image: example.com/x:1}]
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: big, namespace: ml}
spec:
  runtimeRef: {name: elastic, kind: TrainingRuntime}
  trainer:
    numNodes: 8
    env: [{name: PET_NNODES, value: "8"}]
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: elsewhere, namespace: ml}
spec:
  runtimeRef: {name: torch-distributed}
`
	res := runCLI(t, in, "validate", "-f", "-")
	require.Equal(t, 1, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 2, res.stdout)
	assert.Contains(t, res.stdout, "TrainJob/ml/big: spec.trainer.numNodes: Invalid value: 8: must be between the runtime's elasticPolicy.minNodes (2) and maxNodes (4)")
	assert.Contains(t, res.stdout, "TrainJob/ml/big: spec.trainer.env: Invalid value")
	assert.Contains(t, res.stderr, `TrainJob/ml/elsewhere: warning: spec.runtimeRef: ClusterTrainingRuntime "torch-distributed" is not known here`)
}

// TestInjectCLITrainerGoldenFiles: `trainguard inject` leaves the Trainer
// kinds alone and injects their trainer pods, as the golden files say.
func TestInjectCLITrainerGoldenFiles(t *testing.T) {
	for _, name := range []string{"trainer-torch-distributed", "trainer-opted-out", "trainer-runtime-elastic"} {
		in := filepath.Join("..", "..", "webhook", "testdata", name+".in.yaml")
		want, err := os.ReadFile(filepath.Join("..", "..", "webhook", "testdata", name+".out.yaml"))
		require.NoError(t, err)
		res := runCLI(t, "", "inject", "-f", in, "--config", filepath.Join("..", "..", "webhook", "testdata", "config.yaml"))
		require.Equal(t, 0, res.code, res.stderr)
		assert.Equal(t, string(want), res.stdout, name)
	}
}
