package trainer

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// namespacedRuntime is a TrainingRuntime with the given mlPolicy (YAML
// indented for its place).
func namespacedRuntime(ns, name, mlPolicy string) string {
	return `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: ` + name + `, namespace: ` + ns + `}
spec:
  mlPolicy:
` + mlPolicy + `
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers: [{name: node, image: example.com/pytorch:2.7.1, command: [torchrun, /workspace/train.py]}]
`
}

// elasticRuntime is written the Trainer v2.0/v2.1 way, with an elastic
// range torchrun cannot run (minNodes > maxNodes) and a negative restart
// budget: trainguard refuses it where the API has the fields.
func elasticRuntime(ns, name string) string {
	return namespacedRuntime(ns, name, `    torch:
      numProcPerNode: auto
      elasticPolicy: {minNodes: 4, maxNodes: 2, maxRestarts: -1}`)
}

// v23Runtime is written the v2.2+ way: no torch fields (numProcPerNode is
// the TrainJob's).
func v23Runtime(ns, name string) string {
	return namespacedRuntime(ns, name, `    numNodes: 1
    torch: {}`)
}

// TestValidationFollowsServedAPI: trainguard's webhook sees an object
// after the API server decoded it against the CRD it serves (unknown
// fields pruned, then the schema checked), so its rules must follow the
// served version: refuse nothing that version has, admit nothing it
// rejects. Each Trainer release of the suite checks its half.
func TestValidationFollowsServedAPI(t *testing.T) {
	if env.rel.torchV20 {
		t.Logf("%s: the served API has mlPolicy.torch.elasticPolicy and a string numProcPerNode", env.rel)
		t.Run("invalid elastic runtime refused by trainguard", testElasticRefusedByTrainguard)
		t.Run("numProcPerNode auto admitted", testNprocKeywordAdmitted)
		return
	}
	t.Logf("%s: the served API has no mlPolicy.torch.elasticPolicy and an integer numProcPerNode", env.rel)
	t.Run("v2.3 runtime and TrainJob admitted and injected", testV23Admitted)
	t.Run("elasticPolicy pruned or refused by the API server", testElasticHandledByAPIServer)
	t.Run("numProcPerNode auto refused by the API server", testNprocKeywordRefusedByAPIServer)
}

// testElasticRefusedByTrainguard (v2.0): the API server stores the elastic
// policy, so trainguard is what refuses a broken one, naming the fields.
// Strict field validation changes nothing: the server knows the field.
func testElasticRefusedByTrainguard(t *testing.T) {
	ns := namespace(t, true)
	for _, validation := range []string{"", metav1.FieldValidationStrict} {
		_, _, err := createWithWarnings(t, elasticRuntime(ns, "elastic"), validation)
		require.Error(t, err, "fieldValidation=%q", validation)
		assert.Contains(t, err.Error(), "trainguard.io", "trainguard's webhook refused it")
		assert.Contains(t, err.Error(), "spec.mlPolicy.torch.elasticPolicy.maxNodes")
		assert.Contains(t, err.Error(), "spec.mlPolicy.torch.elasticPolicy.maxRestarts")
	}
}

// testNprocKeywordAdmitted (v2.0): auto is a value v2.0 has; trainguard
// admits it and the pods are injected.
func testNprocKeywordAdmitted(t *testing.T) {
	ns := namespace(t, true)
	require.NoError(t, apply(t, torchDistributed("torch-auto-"+ns)))
	require.NoError(t, apply(t, strings.Replace(trainJob(ns, "auto", "torch-auto-"+ns, ""), "trainer: {numNodes: 2}", "trainer: {numNodes: 2, numProcPerNode: auto}", 1)))
	pod := podOfJob(t, jobOf(t, ns, "auto"), 0)
	assert.Contains(t, pod.Annotations[contract.AnnotationInjected], "prestop")
}

// testV23Admitted (v2.3): a namespaced TrainingRuntime without torch
// fields and a TrainJob with an integer numProcPerNode are admitted,
// Trainer passes the value to torchrun, and the pods are injected.
func testV23Admitted(t *testing.T) {
	ns := namespace(t, true)
	_, warnings, err := createWithWarnings(t, v23Runtime(ns, "torch"), metav1.FieldValidationStrict)
	require.NoError(t, err, "a v2.3 runtime passes strict field validation and trainguard")
	assert.NotContains(t, strings.Join(warnings, "\n"), "unknown field")
	require.NoError(t, apply(t, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: v23, namespace: `+ns+`}
spec:
  runtimeRef: {name: torch, kind: TrainingRuntime}
  trainer: {numNodes: 2, numProcPerNode: 4}
`))
	job := jobOf(t, ns, "v23")
	assert.Contains(t, envOf(t, job.Spec.Template.Spec.Containers, "node"), "PET_NPROC_PER_NODE=4", "Trainer read the integer numProcPerNode")
	for i := range 2 {
		pod := podOfJob(t, job, i)
		assert.Contains(t, pod.Annotations[contract.AnnotationInjected], "prestop", "pod %d", i)
		require.NotNil(t, nodeContainer(t, pod).Lifecycle, "pod %d: preStop hook", i)
	}
}

// testElasticHandledByAPIServer (v2.3): what the real API server does with
// a runtime written the v2.0 way. Under strict field validation (kubectl's
// default) it refuses it itself, before any webhook; under the default
// (Warn) it drops the unknown fields with a warning, and trainguard, which
// sees the pruned object, admits it: the broken elastic range no longer
// exists anywhere. A TrainJob on the stored runtime is then admitted and
// injected, so trainguard neither refused a valid object nor went down.
func testElasticHandledByAPIServer(t *testing.T) {
	ns := namespace(t, true)
	_, _, err := createWithWarnings(t, elasticRuntime(ns, "elastic"), metav1.FieldValidationStrict)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown field "spec.mlPolicy.torch.elasticPolicy"`)
	assert.Contains(t, err.Error(), `unknown field "spec.mlPolicy.torch.numProcPerNode"`)
	assert.NotContains(t, err.Error(), "trainguard.io", "the API server refused it, before trainguard's webhook")

	stored, warnings, err := createWithWarnings(t, elasticRuntime(ns, "elastic"), "")
	require.NoError(t, err, "without strict validation the API server prunes, and trainguard admits the pruned runtime")
	assert.Contains(t, strings.Join(warnings, "\n"), `unknown field "spec.mlPolicy.torch.elasticPolicy"`)
	torch, found, err := unstructured.NestedMap(stored.Object, "spec", "mlPolicy", "torch")
	require.NoError(t, err)
	require.True(t, found, "the torch policy itself is kept")
	assert.Empty(t, torch, "elasticPolicy and numProcPerNode were pruned: %v", torch)

	require.NoError(t, apply(t, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: on-pruned, namespace: `+ns+`}
spec:
  runtimeRef: {name: elastic, kind: TrainingRuntime}
  trainer: {numNodes: 2}
`))
	pod := podOfJob(t, jobOf(t, ns, "on-pruned"), 0)
	assert.Contains(t, pod.Annotations[contract.AnnotationInjected], "prestop")
}

// testNprocKeywordRefusedByAPIServer (v2.3): numProcPerNode is an integer
// now; the API server's schema refuses auto before trainguard sees it.
func testNprocKeywordRefusedByAPIServer(t *testing.T) {
	ns := namespace(t, true)
	require.NoError(t, apply(t, torchDistributed("torch-auto-"+ns)))
	err := apply(t, strings.Replace(trainJob(ns, "auto", "torch-auto-"+ns, ""), "trainer: {numNodes: 2}", "trainer: {numNodes: 2, numProcPerNode: auto}", 1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.trainer.numProcPerNode")
	assert.NotContains(t, err.Error(), "trainguard.io", "the API server's schema refused it")
}

// warningLog collects the API server's warning headers.
type warningLog struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningLog) HandleWarningHeader(_ int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// createWithWarnings creates a TrainingRuntime with the given field
// validation ("" is the server's default) and returns the stored object
// and the warnings the server sent.
func createWithWarnings(t *testing.T, doc, fieldValidation string) (*unstructured.Unstructured, []string, error) {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
	log := &warningLog{}
	cfg := rest.CopyConfig(env.cp.Config)
	cfg.WarningHandler = log
	dc, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	gvr := schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainingruntimes"}
	stored, err := dc.Resource(gvr).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{FieldValidation: fieldValidation})
	log.mu.Lock()
	defer log.mu.Unlock()
	return stored, log.msgs, err
}

// envOf lists a container's env as NAME=value.
func envOf(t *testing.T, containers []corev1.Container, name string) []string {
	t.Helper()
	for _, c := range containers {
		if c.Name != name {
			continue
		}
		var out []string
		for _, e := range c.Env {
			out = append(out, e.Name+"="+e.Value)
		}
		return out
	}
	t.Fatalf("no container %s", name)
	return nil
}
