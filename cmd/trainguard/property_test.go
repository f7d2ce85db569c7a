package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// propertyInputs are every golden input (with the golden configuration)
// and every broken input: what the offline commands are held to.
func propertyInputs(t *testing.T) map[string][]string {
	t.Helper()
	testdata := filepath.Join("..", "..", "webhook", "testdata")
	goldens, err := filepath.Glob(filepath.Join(testdata, "*.in.yaml"))
	require.NoError(t, err)
	broken, err := filepath.Glob(filepath.Join("testdata", "broken", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, goldens)
	require.NotEmpty(t, broken)
	inputs := map[string][]string{}
	for _, f := range goldens {
		inputs[f] = []string{"-f", f, "--config", filepath.Join(testdata, "config.yaml")}
	}
	for _, f := range broken {
		inputs[f] = []string{"-f", f}
	}
	return inputs
}

// TestInjectOfInjectIsIdentical: for every input, validate and inject give
// the same verdict, and what inject writes is accepted by validate and
// left byte for byte unchanged by a second inject (the API server may
// reinvoke the webhook; a pipeline may inject twice).
func TestInjectOfInjectIsIdentical(t *testing.T) {
	for path, args := range propertyInputs(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			v := runCLI(t, "", append([]string{"validate"}, args...)...)
			once := runCLI(t, "", append([]string{"inject"}, args...)...)
			require.Equal(t, v.code, once.code, "validate and inject agree: validate %s %s; inject %s", v.stdout, v.stderr, once.stderr)
			if once.code != 0 {
				return
			}
			rest := args[2:] // the --config, if any
			again := runCLI(t, once.stdout, append([]string{"validate", "-f", "-"}, rest...)...)
			assert.Equal(t, 0, again.code, "validate of inject's output: %s %s", again.stdout, again.stderr)
			twice := runCLI(t, once.stdout, append([]string{"inject", "-f", "-"}, rest...)...)
			require.Equal(t, 0, twice.code, twice.stderr)
			assert.Equal(t, once.stdout, twice.stdout, "inject of inject's output changes nothing")
		})
	}
}

// TestValidateWarnsABarePodOfNonDurableCheckpoints: docs/cli.md promises
// the warning for every training job and pod; the webhook gives it for the
// Pod it injected.
func TestValidateWarnsABarePodOfNonDurableCheckpoints(t *testing.T) {
	pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: trainer\n  namespace: ml\nspec:\n  containers:\n  - name: pytorch\n    image: example/train:1\n"
	for _, cmd := range []string{"validate", "inject"} {
		res := runCLI(t, pod, cmd, "-f", "-")
		require.Equal(t, 0, res.code, res.stdout+res.stderr)
		assert.Contains(t, res.stderr, "Pod/ml/trainer: warning: spec.containers[0]: checkpoints are not durable", cmd)
	}
	// A pod that is not a training pod is not injected online, nor judged.
	sidecar := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: ml\nspec:\n  containers:\n  - name: etcd\n    image: example/etcd:1\n    ports:\n    - containerPort: 9601\n"
	res := runCLI(t, sidecar, "validate", "-f", "-")
	assert.Equal(t, 0, res.code, res.stdout)
	assert.NotContains(t, res.stderr, "not durable")
}
