package main

import (
	"github.com/trainguard/trainguard/internal/jobs"

	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The CLI tests run the real program: the test binary re-executes itself
// running only TestRunMainHelper, which calls main() with the arguments
// after "--", so flag parsing, stdout/stderr and os.Exit codes are all
// real. (It is the code `go build ./cmd/trainguard` produces, without
// linking the whole binary a second time on every test run.)
const runMainEnv = "TRAINGUARD_TEST_RUN_MAIN"

func TestRunMainHelper(t *testing.T) {
	if os.Getenv(runMainEnv) != "1" {
		t.Skip("helper process for the CLI tests")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Args = append([]string{"trainguard"}, args...)
	main()
	os.Exit(0)
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs `trainguard args...` with stdin and returns its exit code and output.
func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestRunMainHelper$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

const validJob = `apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: ok
  namespace: ml
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: example/train:1
`

const elasticNoCheckpoint = `apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: elastic
spec:
  elasticPolicy:
    minReplicas: 1
    maxReplicas: 3
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: example/train:1
`

// threeInvalidJobs holds three invalid jobs (kubeflow, KubeDL, kubeflow)
// around a valid one and a document of a kind validate does not handle.
const threeInvalidJobs = `apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: first
  namespace: ml
spec:
  elasticPolicy:
    minReplicas: 3
    maxReplicas: 2
    rdzvBackend: zookeeper
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: example/train:1
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: unrelated
data:
  replicas: "-1"
---
apiVersion: training.kubedl.io/v1alpha1
kind: PyTorchJob
metadata:
  name: second
  namespace: ml
  annotations:
    kubedl.io/enable-elastic-training: "yes"
spec:
  enableElastic: true
  elasticPolicy:
    rdzvBackend: etcd
    rdzvEndpoint: etcd-service
    minReplicas: 1
    maxReplicas: 2
---
` + validJob + `---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: third
  annotations:
    trainguard.io/gpu-limit: "100"
spec:
  nprocPerNode: lots
  pytorchReplicaSpecs:
    Master:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: example/train:1
`

// claimConfig gives checkpoints a claim, so valid jobs get no warning.
const claimConfig = "apiVersion: config.trainguard.io/v1alpha1\nkind: Configuration\ncheckpoint: {claim: ckpt}\n"

func TestValidateCLIValid(t *testing.T) {
	res := runCLI(t, "", "validate", "-f", writeFile(t, "job.yaml", validJob), "--config", writeFile(t, "c.yaml", claimConfig))
	assert.Equal(t, 0, res.code, res.stdout+res.stderr)
	assert.Empty(t, res.stdout)
	assert.Empty(t, res.stderr)
}

func TestValidateCLIWarningsGoToStderr(t *testing.T) {
	res := runCLI(t, "", "validate", "-f", writeFile(t, "job.yaml", elasticNoCheckpoint))
	assert.Equal(t, 0, res.code)
	assert.Empty(t, res.stdout)
	assert.Contains(t, res.stderr, "PyTorchJob/elastic: warning: spec.pytorchReplicaSpecs[Worker].template.spec.containers[0]: checkpoints are not durable: /checkpoint is on the container's own filesystem")
}

func TestValidateCLIReportsEveryErrorOfEveryDocument(t *testing.T) {
	res := runCLI(t, "", "validate", "-f", writeFile(t, "jobs.yaml", threeInvalidJobs))
	assert.Equal(t, 1, res.code, res.stderr)
	want := []string{
		`PyTorchJob/ml/first: spec.elasticPolicy.maxReplicas: Invalid value: 2: must be ≥ minReplicas (3); raise maxReplicas or lower minReplicas`,
		`PyTorchJob/ml/first: spec.elasticPolicy.rdzvBackend: Unsupported value: "zookeeper": supported values: "c10d", "etcd", "etcd-v2"`,
		`PyTorchJob/ml/second: metadata.annotations[kubedl.io/enable-elastic-training]: Invalid value: "yes": must be "true" or "false"`,
		`PyTorchJob/ml/second: spec.elasticPolicy.rdzvEndpoint: Invalid value: "etcd-service": must be host:port with a port between 1 and 65535, e.g. etcd-service:2379`,
		`PyTorchJob/third: metadata.annotations[trainguard.io/gpu-limit]: Invalid value: "100": must be an integer between 0 and 64`,
		`PyTorchJob/third: spec.nprocPerNode: Invalid value: "lots": must be auto, cpu, gpu or a positive integer such as "4"`,
		`PyTorchJob/third: spec.pytorchReplicaSpecs[Master].replicas: Invalid value: 2: must be 1: a job has exactly one Master; add Workers instead`,
	}
	assert.Equal(t, want, strings.Split(strings.TrimSpace(res.stdout), "\n"))
	assert.NotContains(t, res.stdout, "ConfigMap")
	assert.NotContains(t, res.stdout, "PyTorchJob/ml/ok")
}

func TestValidateCLIStdin(t *testing.T) {
	res := runCLI(t, threeInvalidJobs, "validate", "-f", "-")
	assert.Equal(t, 1, res.code)
	assert.Len(t, strings.Split(strings.TrimSpace(res.stdout), "\n"), 7)

	res = runCLI(t, validJob, "validate", "-f", "-")
	assert.Equal(t, 0, res.code, res.stdout)
}

func TestValidateCLIList(t *testing.T) {
	var job map[string]interface{}
	require.NoError(t, yaml.Unmarshal([]byte(strings.Replace(validJob, "replicas: 2", "replicas: 0", 1)), &job))
	list, err := json.Marshal(map[string]interface{}{"apiVersion": "v1", "kind": "List", "items": []interface{}{job}})
	require.NoError(t, err)
	res := runCLI(t, string(list), "validate", "-f", "-")
	assert.Equal(t, 1, res.code)
	assert.Equal(t, "PyTorchJob/ml/ok: spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: 0: must be at least 1; remove this replica spec if it is not needed\n", res.stdout)
}

func TestValidateCLIUndecodableDocumentIsInvalid(t *testing.T) {
	cases := map[string]string{
		"wrong type":   strings.NewReplacer("replicas: 2", "replicas: two", "name: ok", "name: typo").Replace(validJob),
		"bad yaml":     "apiVersion: v1\nkind: [\n",
		"no kind":      "metadata:\n  name: x\n",
		"not a object": "- a\n- b\n",
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			res := runCLI(t, validJob+"---\n"+doc, "validate", "-f", "-")
			assert.Equal(t, 1, res.code, res.stdout+res.stderr)
			assert.NotEmpty(t, res.stdout)
			assert.NotContains(t, res.stdout, "PyTorchJob/ml/ok")
		})
	}
}

func TestValidateCLIUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"missing file":     {"validate", "-f", filepath.Join(t.TempDir(), "nope.yaml")},
		"missing -f":       {"validate"},
		"unknown flag":     {"validate", "-f", "-", "--frobnicate"},
		"extra argument":   {"validate", "-f", "-", "job.yaml"},
		"bad config":       {"validate", "-f", "-", "--config", writeFile(t, "c.yaml", "taskd:\n  port: 0\n  bogus: 1\n")},
		"missing config":   {"validate", "-f", "-", "--config", filepath.Join(t.TempDir(), "nope.yaml")},
		"directory as -f ": {"validate", "-f", t.TempDir()},
	} {
		t.Run(name, func(t *testing.T) {
			res := runCLI(t, validJob, args...)
			assert.Equal(t, 2, res.code, res.stdout+res.stderr)
		})
	}
}

func TestValidateCLIConfig(t *testing.T) {
	job := strings.Replace(validJob, "image: example/train:1", "image: example/train:1\n              ports:\n                - name: metrics\n                  containerPort: 9601", 1)
	res := runCLI(t, job, "validate", "-f", "-")
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stdout, "PyTorchJob/ml/ok: spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports[0].containerPort: Invalid value: 9601: port 9601 is reserved for MindCluster TaskD")

	cfg := writeFile(t, "config.yaml", "taskd:\n  enabled: false\n")
	res = runCLI(t, job, "validate", "-f", "-", "--config", cfg)
	assert.Equal(t, 0, res.code, res.stdout)
}

func TestValidateCLIHelp(t *testing.T) {
	res := runCLI(t, "", "validate", "--help")
	assert.Equal(t, 0, res.code)
	for _, s := range []string{"-f, --filename", "--config", "Exit status: 0", "<Kind>/<namespace>/<name>: <field path>: <message>"} {
		assert.Contains(t, res.stdout, s)
	}
}

// TestValidateCLIAcceptsKubeflowExamples runs validate on every PyTorchJob
// example shipped in the training operator's module: whatever kubeflow
// documents as a working job must pass.
func TestValidateCLIAcceptsKubeflowExamples(t *testing.T) {
	dir := kubeflowModuleDir(t, "github.com/kubeflow/training-operator@v1.9.4")
	var files []string
	require.NoError(t, filepath.WalkDir(filepath.Join(dir, "examples"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		if hasPyTorchJob(t, path) {
			files = append(files, path)
		}
		return nil
	}))
	// v1.9.4 ships five (v1.8.1 shipped eight); fewer means the discovery
	// above broke.
	require.GreaterOrEqual(t, len(files), 5, "PyTorchJob examples found: %v", files)
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		t.Run(rel, func(t *testing.T) {
			res := runCLI(t, "", "validate", "-f", f)
			assert.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
			assert.Empty(t, res.stdout)
		})
	}
}

// kubeflowModuleDir downloads (or finds in the module cache) a module and
// returns its directory. It runs outside this module so go.mod and go.sum
// stay untouched.
func kubeflowModuleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			t.Fatalf("go mod download %s failed (the Go module proxy must be reachable): %s %s", module, err, exitErr.Stderr)
		}
		t.Fatalf("cannot run go mod download: %v", err)
	}
	var info struct{ Dir, Error string }
	require.NoError(t, json.Unmarshal(out, &info))
	require.Empty(t, info.Error)
	require.DirExists(t, info.Dir)
	return info.Dir
}

// hasPyTorchJob reports whether a YAML file holds a kubeflow.org/v1 PyTorchJob.
func hasPyTorchJob(t *testing.T, path string) bool {
	t.Helper()
	docs, err := readDocuments(path, nil)
	require.NoError(t, err)
	for _, doc := range docs {
		var h jobs.Header
		if yaml.Unmarshal(doc, &h) == nil && h.Kind == "PyTorchJob" && h.APIVersion == "kubeflow.org/v1" {
			return true
		}
	}
	return false
}

// TestEveryFilenameIsRead: like kubectl, every -f is read (not only the
// last), a directory gives its manifests (-R its subdirectories' too), and
// stdin can be given once.
func TestEveryFilenameIsRead(t *testing.T) {
	bad := filepath.Join("testdata", "broken", "field-typo.yaml")
	good := writeFile(t, "good.yaml", validJob)
	typo := `PyTorchJob/ml/train: spec.pytorchReplicaSpecs[Worker].replica: unknown field "replica"`
	for _, order := range [][]string{{bad, good}, {good, bad}} {
		for _, cmd := range []string{"validate", "inject"} {
			res := runCLI(t, "", cmd, "-f", order[0], "-f", order[1])
			assert.Equal(t, 1, res.code, "%s %v: %s", cmd, order, res.stdout+res.stderr)
			assert.Contains(t, res.stdout+res.stderr, typo)
		}
	}
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(validJob), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.json"), []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ml"}}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a manifest"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "bad.yml"), []byte("apiVersion: v1\n"), 0o600))
	res := runCLI(t, "", "validate", "-f", dir)
	assert.Equal(t, 0, res.code, "the subdirectory is read only with -R: %s", res.stdout)
	res = runCLI(t, "", "validate", "-f", dir, "-R")
	assert.Equal(t, 1, res.code, res.stdout)
	assert.Contains(t, res.stdout, filepath.Join(dir, "sub", "bad.yml")+" document 1: not a Kubernetes object", "with several files, a nameless document is named by its file")
	res = runCLI(t, "", "inject", "-f", dir)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "trainguard.io/injected")
	assert.Contains(t, res.stdout, `"kind":"ConfigMap"`, "every file's documents are written, untouched ones byte for byte")

	res = runCLI(t, validJob, "validate", "-f", "-", "-f", "-")
	assert.Equal(t, 2, res.code)
	assert.Contains(t, res.stderr, "-f - (stdin) given more than once")
	res = runCLI(t, validJob, "validate", "-f", "-", "-f", good)
	assert.Equal(t, 0, res.code, res.stdout)
	res = runCLI(t, "", "validate", "-f", t.TempDir())
	assert.Equal(t, 2, res.code)
	assert.Contains(t, res.stderr, "holds no .yaml, .yml or .json files")
}
