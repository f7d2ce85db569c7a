package builders

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTrainJobAndJobSet: the builders make, field for field, the TrainJob
// and JobSet the suites used to write out (the API server drops the null
// and empty fields Go's types marshal, so the comparison drops them too).
func TestTrainJobAndJobSet(t *testing.T) {
	tj := MakeTrainJob("ns", "llm").WithAnnotation("a", "b")
	assert.JSONEq(t, `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob",
		"metadata":{"name":"llm","namespace":"ns","annotations":{"a":"b"}},
		"spec":{"runtimeRef":{"name":"torch-distributed"}}}`, pruned(t, tj.Unstructured().Object))
	assert.Equal(t, "trainer.kubeflow.org/v1alpha1, Kind=TrainJob", tj.GVK().String())

	owner := metav1.OwnerReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "llm", UID: "u", Controller: Ptr(true)}
	js := MakeJobSet("ns", "llm").WithOwner(owner)
	assert.JSONEq(t, `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet",
		"metadata":{"name":"llm","namespace":"ns","ownerReferences":[
			{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","name":"llm","uid":"u","controller":true}]},
		"spec":{"replicatedJobs":[{"name":"node","replicas":1,"template":{"spec":{"template":{"spec":{
			"restartPolicy":"Never","containers":[{"name":"node","image":"example.com/train:1"}]}}}}}]}}`,
		pruned(t, js.Unstructured().Object))
	assert.Equal(t, "jobset.x-k8s.io/v1alpha2, Kind=JobSet", js.GVK().String())
}

// TestExitCodeWorkersUnderBothAPIs: KubeDL's job is kubeflow's under
// another apiVersion, as the outcome suite runs both.
func TestExitCodeWorkersUnderBothAPIs(t *testing.T) {
	kf := MakeKubeflowJob("ns", "j").WithExitCodeWorkers(1).Unstructured()
	dl := MakeKubeDLJob("ns", "j").WithExitCodeWorkers(1).Unstructured()
	assert.Equal(t, "training.kubedl.io/v1alpha1", dl.GetAPIVersion())
	dl.SetAPIVersion(kf.GetAPIVersion())
	assert.JSONEq(t, pruned(t, kf.Object), pruned(t, dl.Object))
	assert.JSONEq(t, `{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"j","namespace":"ns"},
		"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":1,"restartPolicy":"ExitCode",
			"template":{"spec":{"containers":[{"name":"pytorch","image":"example.com/train:1"}]}}}}}}`, pruned(t, kf.Object))
}

// pruned is o as JSON without nulls and empty objects.
func pruned(t *testing.T, o map[string]any) string {
	t.Helper()
	var prune func(v any) (any, bool)
	prune = func(v any) (any, bool) {
		switch v := v.(type) {
		case nil:
			return nil, false
		case map[string]any:
			out := map[string]any{}
			for k, e := range v {
				if p, ok := prune(e); ok {
					out[k] = p
				}
			}
			return out, len(out) > 0
		case []any:
			out := make([]any, 0, len(v))
			for _, e := range v {
				p, _ := prune(e)
				out = append(out, p)
			}
			return out, true
		}
		return v, true
	}
	p, _ := prune(o)
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	return string(raw)
}
