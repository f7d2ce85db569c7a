package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBrokenInputsOfANewUser runs testdata/broken: the inputs a new user
// gets wrong (typos, wrong types, overflows, wrong apiVersion, empty,
// binary, YAML syntax, a List of mixed kinds). `validate` must exit
// non-zero naming the field or the problem, and `inject` must refuse the
// same input with the same exit status and message, writing nothing.
func TestBrokenInputsOfANewUser(t *testing.T) {
	cases := []struct {
		file string
		code int
		want []string // every line must be in the output
	}{
		{"annotation-key-typo.yaml", 1, []string{`PyTorchJob/ml/train: metadata.annotations[trainguard.io/gpu-limt]: Invalid value: "trainguard.io/gpu-limt": unknown trainguard.io/ annotation; did you mean trainguard.io/gpu-limit?`}},
		{"annotation-bad-value.yaml", 1, []string{`PyTorchJob/ml/train: metadata.annotations[trainguard.io/gpu-limit]: Invalid value: "lots": must be an integer between 0 and 64`}},
		{"label-key-typo.yaml", 1, []string{`spec.pytorchReplicaSpecs[Worker].template.metadata.labels[trainguard.io/manged]: Invalid value: "trainguard.io/manged": unknown trainguard.io/ label; did you mean trainguard.io/managed?`}},
		{"namespace-typo.yaml", 1, []string{`Namespace/ml: metadata.annotations[trainguard.io/checkpoint-clam]: Invalid value: "trainguard.io/checkpoint-clam": unknown trainguard.io/ annotation; did you mean trainguard.io/checkpoint-claim?`}},
		{"field-typo.yaml", 1, []string{`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].replica: unknown field "replica"; did you mean "replicas"?`}},
		{"container-field-typo.yaml", 1, []string{`spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].imagee: unknown field "imagee"; did you mean "image"?`}},
		{"kind-typo.yaml", 1, []string{`PytorchJob/ml/train: kind: Unsupported value: "PytorchJob": not a kind of kubeflow.org/v1; did you mean PyTorchJob?`}},
		{"unknown-apiversion.yaml", 1, []string{`PyTorchJob/ml/train: apiVersion: Unsupported value: "kubeflow.org/v2": no PyTorchJob is served in this version; use kubeflow.org/v1 or training.kubedl.io/v1alpha1`}},
		{"wrong-group.yaml", 1, []string{`apiVersion: Unsupported value: "kubeflow.com/v1": no PyTorchJob is served in this version`}},
		{"string-for-integer.yaml", 1, []string{`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: "two": must be of type integer`}},
		{"string-for-boolean.yaml", 1, []string{`PyTorchJob/ml/train: spec.elasticPolicy.standalone: Invalid value: "yes": must be of type boolean`}},
		{"int32-overflow.yaml", 1, []string{`spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports[0].containerPort: Invalid value: 99999999999: must be of type int32: between -2147483648 and 2147483647`}},
		{"elastic-overflow.yaml", 1, []string{`PyTorchJob/ml/train: spec.elasticPolicy.maxReplicas: Invalid value: 3000000000: must be of type int32`}},
		{"bad-quantity.yaml", 1, []string{`spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.limits[memory]: Invalid value: "lots": quantities must match`}},
		{"several-type-errors.yaml", 1, []string{
			`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: "2": must be of type integer`,
			`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].args: Invalid value: "--epochs=3": must be of type array`,
			`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Invalid value: 1: must be of type string`,
			`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports[0].containerPort: Invalid value: 70000000000: must be of type int32`,
		}},
		{"min-above-max.yaml", 1, []string{`PyTorchJob/ml/train: spec.elasticPolicy.maxReplicas: Invalid value: 2: must be ≥ minReplicas (4)`}},
		{"list-mixed-kinds.yaml", 1, []string{`PyTorchJob/train: spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: -1: must be at least 1`}},
		{"yaml-syntax.yaml", 1, []string{`document 1: not valid YAML: yaml: line 4: did not find expected key`}},
		{"no-kind.yaml", 1, []string{`document 1: not a Kubernetes object: apiVersion and kind must be set`}},
		{"not-an-object.yaml", 1, []string{`document 1: not a Kubernetes object: the document is array`}},
		{"empty.yaml", 2, []string{`empty.yaml holds no Kubernetes objects (it is empty or only comments)`}},
		{"comments-only.yaml", 2, []string{`comments-only.yaml holds no Kubernetes objects`}},
		{"bare-pod-required-durable.yaml", 1, []string{`Pod/ml/trainer: spec.containers[0].volumeMounts: Forbidden: checkpoints are not durable`}},
		{"bare-pod-taskd-port.yaml", 1, []string{`Pod/ml/trainer: spec.containers[0].ports[0].containerPort: Invalid value: 9601: port 9601 is reserved for MindCluster TaskD`}},
		{"duplicate-key.yaml", 1, []string{`PyTorchJob/ml/train: duplicate key: line 11: key "replicas" already set in map`}},
		{"fractional-gpu.yaml", 1, []string{`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "500m": must be an integer`}},
		{"fractional-gpu-pod.yaml", 1, []string{
			`Pod/ml/inference: spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "500m": must be an integer`,
			`Pod/ml/inference: spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "500m": must be an integer`,
		}},
		{"type-error-and-annotation-typo.yaml", 1, []string{
			`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: "two": must be of type integer`,
			`PyTorchJob/ml/train: metadata.annotations[trainguard.io/prestop-timout]: Invalid value: "trainguard.io/prestop-timout": unknown trainguard.io/ annotation; did you mean trainguard.io/prestop-timeout?`,
		}},
		{"runpolicy-typos.yaml", 1, []string{
			`PyTorchJob/ml/train: spec.runPolicy.backoffLimt: unknown field "backoffLimt"; did you mean "backoffLimit"?`,
			`PyTorchJob/ml/train: spec.runPolicy.ttlSecondsAfterFinish: unknown field "ttlSecondsAfterFinish"; did you mean "ttlSecondsAfterFinished"?`,
		}},
		{"required-by-crd.yaml", 1, []string{
			`PyTorchJob/ml/train: spec.elasticPolicy.metrics[0].type: Required value`,
			`PyTorchJob/ml/train: spec.elasticPolicy.metrics[0].resource.target.type: Required value`,
			`PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].template.spec.containers[1].name: Required value`,
		}},
		{"trainjob-typos.yaml", 1, []string{
			`TrainJob/ml/train: spec.trainer.numNode: unknown field "numNode"; did you mean "numNodes"?`,
			`TrainJob/ml/train: spec.trainer.resourcePerNode: unknown field "resourcePerNode"; did you mean "resourcesPerNode"?`,
		}},
		{"binary.yaml", 2, []string{`not YAML: the input is binary (a NUL byte at offset 7)`}},
	}
	files, err := filepath.Glob(filepath.Join("testdata", "broken", "*"))
	require.NoError(t, err)
	require.Len(t, files, len(cases), "every file in testdata/broken has a row")
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "broken", tc.file)
			_, err := os.Stat(path)
			require.NoError(t, err)
			v := runCLI(t, "", "validate", "-f", path)
			assert.Equal(t, tc.code, v.code, "validate: stdout %s stderr %s", v.stdout, v.stderr)
			in := runCLI(t, "", "inject", "-f", path)
			assert.Equal(t, tc.code, in.code, "inject: stdout %s stderr %s", in.stdout, in.stderr)
			assert.Empty(t, in.stdout, "inject writes nothing for a refused input")
			for _, want := range tc.want {
				assert.Contains(t, v.stdout+v.stderr, want, "validate")
				assert.Contains(t, in.stderr, want, "inject says the same")
			}
		})
	}
}

// TestValidateAndInjectAgreeOnANamespace: a Namespace in the input gives
// both commands the same namespace-level policy, wherever it appears.
func TestValidateAndInjectAgreeOnANamespace(t *testing.T) {
	ns := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n  annotations:\n    trainguard.io/inject: enabled\n    trainguard.io/checkpoint-claim: team-ckpt\n    trainguard.io/gpu-limit: \"2\"\n"
	for name, in := range map[string]string{"namespace first": ns + "---\n" + validJob, "namespace last": validJob + "---\n" + ns} {
		t.Run(name, func(t *testing.T) {
			v := runCLI(t, in, "validate", "-f", "-")
			assert.Equal(t, 0, v.code, v.stdout)
			assert.NotContains(t, v.stderr, "not durable", "validate sees the namespace's claim")
			res := runCLI(t, in, "inject", "-f", "-")
			require.Equal(t, 0, res.code, res.stderr)
			assert.NotContains(t, res.stderr, "not durable")
			assert.Contains(t, res.stdout, "claimName: team-ckpt", "inject mounts the namespace's claim")
			assert.Contains(t, res.stdout, `nvidia.com/gpu: "2"`, "the namespace's gpu-limit asks for the GPU default")
		})
	}
	// Required durable checkpoints in the namespace: both refuse.
	strict := strings.Replace(ns, "    trainguard.io/checkpoint-claim: team-ckpt\n", "    trainguard.io/require-durable-checkpoints: \"true\"\n", 1) + "---\n" + validJob
	v := runCLI(t, strict, "validate", "-f", "-")
	assert.Equal(t, 1, v.code)
	assert.Contains(t, v.stdout, "PyTorchJob/ml/ok: spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].volumeMounts: Forbidden: checkpoints are not durable")
	in := runCLI(t, strict, "inject", "-f", "-")
	assert.Equal(t, 1, in.code)
	assert.Contains(t, in.stderr, "PyTorchJob/ml/ok: spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].volumeMounts: Forbidden: checkpoints are not durable")
	// A namespace that opted out: inject leaves its objects alone.
	out := runCLI(t, strings.Replace(ns, "inject: enabled", "inject: disabled", 1)+"---\n"+validJob, "inject", "-f", "-")
	require.Equal(t, 0, out.code, out.stderr)
	assert.NotContains(t, out.stdout, "trainguard.io/injected")
	assert.Contains(t, out.stderr, "namespace ml is annotated trainguard.io/inject=disabled")
	// and validate does not apply trainguard's rules there either, as the webhook.
	optedOut := strings.Replace(ns, "inject: enabled", "inject: disabled", 1) + "---\n" + strings.Replace(validJob, "  namespace: ml\n", "  namespace: ml\n  annotations:\n    trainguard.io/require-durable-checkpoints: \"true\"\n", 1)
	v = runCLI(t, optedOut, "validate", "-f", "-")
	assert.Equal(t, 0, v.code, v.stdout)
	assert.Contains(t, v.stderr, "PyTorchJob/ml/ok: warning: trainguard's rules not applied: namespace ml is annotated trainguard.io/inject=disabled")
}

// TestInjectCLIKeepsCommentOnlyDocuments: docs/cli.md promises pass-through
// byte for byte; a document of comments only is part of the input too.
func TestInjectCLIKeepsCommentOnlyDocuments(t *testing.T) {
	in := "# kept: a note between documents\n---\n" + configMapDoc + "---\n# and one at the end\n"
	res := runCLI(t, in, "inject", "-f", "-")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, in, res.stdout)
}

// TestInjectCLIHelpHasNoGarbledPlaceholder: a backquoted word in a flag's
// usage becomes its placeholder in pflag.
func TestInjectCLIHelpHasNoGarbledPlaceholder(t *testing.T) {
	res := runCLI(t, "", "inject", "--help")
	require.Equal(t, 0, res.code)
	assert.Contains(t, res.stdout, "      --config string ")
	assert.NotContains(t, res.stdout, "--config trainguard")
	assert.Contains(t, res.stdout, "Exit status: 0 written, 1 invalid input")
}
