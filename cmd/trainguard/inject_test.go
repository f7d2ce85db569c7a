package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

const configMapDoc = `apiVersion: v1
kind: ConfigMap
metadata:
  name: untouched
data:
  key: "  spacing and # comments are kept byte for byte"
`

func TestInjectCLIMutatesAndPassesThrough(t *testing.T) {
	in := configMapDoc + "---\n" + validJob
	res := runCLI(t, in, "inject", "-f", "-")
	require.Equal(t, 0, res.code, res.stderr)
	docs := strings.Split(res.stdout, "---\n")
	require.Len(t, docs, 2)
	assert.Equal(t, configMapDoc, docs[0], "documents trainguard does not handle pass through unchanged")
	var job map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(docs[1]), &job))
	ann := job["metadata"].(map[string]any)["annotations"].(map[string]any)
	assert.Equal(t, "prestop,taskd,recover-strategy,restart-rules", ann["trainguard.io/injected"], "a CPU job gets no GPU")
}

func TestInjectCLIMatchesGoldenFiles(t *testing.T) {
	// The offline path is the webhook's: its golden outputs are the CLI's outputs.
	for _, name := range []string{"master-worker", "namespace-override", "bare-pod"} {
		in := filepath.Join("..", "..", "webhook", "testdata", name+".in.yaml")
		want, err := os.ReadFile(filepath.Join("..", "..", "webhook", "testdata", name+".out.yaml"))
		require.NoError(t, err)
		res := runCLI(t, "", "inject", "-f", in, "--config", filepath.Join("..", "..", "webhook", "testdata", "config.yaml"))
		require.Equal(t, 0, res.code, res.stderr)
		assert.Equal(t, string(want), res.stdout, name)
	}
}

func TestInjectCLIConfigAndUsageErrors(t *testing.T) {
	res := runCLI(t, validJob, "inject", "-f", "-", "--config", writeFile(t, "c.yaml", "gpu: {defaultCount: 3, defaultFor: AllJobs}\n"))
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, `nvidia.com/gpu: "3"`)

	for name, args := range map[string][]string{
		"no file":      {"inject"},
		"missing file": {"inject", "-f", filepath.Join(t.TempDir(), "nope.yaml")},
		"bad config":   {"inject", "-f", "-", "--config", writeFile(t, "bad.yaml", "gpu: {count: 3}\n")},
	} {
		t.Run(name, func(t *testing.T) {
			res := runCLI(t, validJob, args...)
			assert.Equal(t, 2, res.code)
			assert.NotEmpty(t, res.stderr, "exit 2 must say why")
			assert.Empty(t, res.stdout, "nothing half-written on stdout")
		})
	}
}

func TestInjectCLIWarningsGoToStderr(t *testing.T) {
	res := runCLI(t, validJob, "inject", "-f", "-")
	require.Equal(t, 0, res.code)
	assert.Contains(t, res.stderr, "checkpoints are not durable")
	assert.NotContains(t, res.stdout, "warning")
}

// Nothing is left unchanged in silence: inject and validate name every
// object they leave as it is and why, in the webhook's words (the pod's
// reason is the one the golden files record through the admission endpoint).
func TestInjectAndValidateSayWhyObjectsAreLeftUnchanged(t *testing.T) {
	const cpuPod = `apiVersion: v1
kind: Pod
metadata: {name: notebook, namespace: team-a}
spec:
  containers:
  - {name: lab, image: example.com/lab:1, command: [python3, -m, jupyterlab]}
`
	const gpuPod = `apiVersion: v1
kind: Pod
metadata: {name: gpu-train, namespace: team-a}
spec:
  containers:
  - name: train
    image: example.com/train:1
    command: [python, train.py]
    resources: {limits: {nvidia.com/gpu: 1}}
`
	in := configMapDoc + "---\n" + cpuPod + "---\n" + gpuPod
	for _, cmd := range []string{"inject", "validate"} {
		t.Run(cmd, func(t *testing.T) {
			res := runCLI(t, in, cmd, "-f", "-")
			require.Equal(t, 0, res.code, res.stderr)
			assert.Contains(t, res.stderr, "ConfigMap/untouched: warning: left unchanged by trainguard: trainguard does not handle v1 ConfigMap")
			assert.Contains(t, res.stderr, "Pod/team-a/notebook: warning: left unchanged by trainguard: not a training pod: no container named pytorch or ascend")
			assert.Contains(t, res.stderr, `Pod/team-a/gpu-train: warning: container "train" asks for nvidia.com/gpu and runs python`)
			assert.NotContains(t, res.stderr, "gpu-train: warning: left unchanged")
		})
	}
	res := runCLI(t, gpuPod, "inject", "-f", "-")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "trainguard.io/injected:", "a GPU pod running python is a training pod by default")
}

// Audit mode offline says what would happen online: a namespace in audit
// (or --config admissionMode: audit) gets its objects unchanged, with what
// would be injected and refused as warnings, and validate exits 0.
func TestAuditModeOffline(t *testing.T) {
	const auditNamespace = `apiVersion: v1
kind: Namespace
metadata:
  name: ml
  annotations: {trainguard.io/inject: enabled, trainguard.io/admission-mode: audit}
---
`
	invalid := strings.SplitN(threeInvalidJobs, "---\n", 2)[0]
	for name, tc := range map[string]struct{ in, config string }{
		"namespace annotation": {in: auditNamespace + invalid},
		"configuration":        {in: invalid, config: writeFile(t, "audit.yaml", "apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\nadmissionMode: audit\n")},
	} {
		t.Run(name, func(t *testing.T) {
			args := []string{"-f", "-"}
			if tc.config != "" {
				args = append(args, "--config", tc.config)
			}
			res := runCLI(t, tc.in, append([]string{"validate"}, args...)...)
			require.Equal(t, 0, res.code, "audit mode refuses nothing: %s", res.stdout)
			assert.Contains(t, res.stderr, "PyTorchJob/ml/first: warning: audit mode, nothing changed: trainguard would refuse this object: spec.elasticPolicy.maxReplicas")
			res = runCLI(t, tc.in, append([]string{"inject"}, args...)...)
			require.Equal(t, 0, res.code, res.stderr)
			assert.Contains(t, res.stderr, "PyTorchJob/ml/first: warning: audit mode, nothing changed: trainguard would inject prestop,taskd,recover-strategy,restart-rules")
			assert.NotContains(t, res.stdout, "trainguard.io/injected", "nothing injected")
		})
	}
}

// inject --diff prints what would change, one field a line, with the
// paths `make demo` prints (objdiff); unchanged objects print nothing.
func TestInjectDiff(t *testing.T) {
	const pod = `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: a}
spec:
  terminationGracePeriodSeconds: 30
  containers: [{name: pytorch, image: x}]
`
	res := runCLI(t, configMapDoc+"---\n"+pod, "inject", "--diff", "-f", "-")
	require.Equal(t, 0, res.code, res.stderr)
	assert.True(t, strings.HasPrefix(res.stdout, "Pod/a/p:\n"), res.stdout)
	for _, line := range []string{
		"  + spec.containers[pytorch].lifecycle.preStop.exec.command: [/opt/trainguard/bin/trainguard-agent, prestop, --timeout=60s]",
		"  ~ spec.terminationGracePeriodSeconds: 30 -> 90",
		"  + metadata.labels[trainguard.io/managed]: \"true\"",
	} {
		assert.Contains(t, res.stdout, line+"\n")
	}
	assert.NotContains(t, res.stdout, "untouched", "an unchanged object has no diff")
}
