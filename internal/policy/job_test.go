package policy

import (
	"context"
	"errors"
	"testing"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// podKind is the Pod adapter: its Pod capability is what makes a job a pod.
var podKind = jobs.Pod()

func trainerPod(ann map[string]string) jobs.Job {
	return jobs.PodJob{Pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "llm-node-0-0", Annotations: ann, Labels: map[string]string{
			trainerv1alpha1.LabelJobSetName: "llm", trainerv1alpha1.LabelJobSetReplicatedJob: "node"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node"}}},
	}}
}

// The job layer every webhook reads: a trainer pod takes its TrainJob's
// annotations (in the request's namespace when the pod has none yet), the
// pod's own on top, Trainer's container name and the TrainJob's directory.
func TestLayerOfATrainerPodIsItsTrainJobs(t *testing.T) {
	var asked string
	lookup := func(_ context.Context, ns, name string) (map[string]string, bool, error) {
		asked = ns + "/" + name
		return map[string]string{contract.AnnotationGPULimit: "2", contract.AnnotationTaskD: "disabled"}, true, nil
	}
	pod := trainerPod(map[string]string{contract.AnnotationGPULimit: "4"})
	layer, err := LayerOf(t.Context(), podKind, pod, "team-a", lookup)
	require.NoError(t, err)
	assert.Equal(t, "team-a/llm", asked)
	assert.Equal(t, "llm", layer.TrainJob)
	assert.Equal(t, "4", layer.Annotations[contract.AnnotationGPULimit], "the pod is the more specific object")
	assert.Equal(t, "disabled", layer.Annotations[contract.AnnotationTaskD])
	assert.False(t, layer.TrainJobOptedOut)
	p, _ := Resolve(configv1alpha1.Default(), nil, layer.Annotations)
	layer.Apply(p)
	assert.Equal(t, "node", p.TrainingContainers[0])
	assert.Equal(t, "trainjob/llm", p.JobDirectory)
}

func TestLayerOfOtherJobs(t *testing.T) {
	optedOut := func(context.Context, string, string) (map[string]string, bool, error) {
		return map[string]string{contract.AnnotationInject: contract.InjectDisabled}, true, nil
	}
	layer, err := LayerOf(t.Context(), podKind, trainerPod(nil), "team-a", optedOut)
	require.NoError(t, err)
	assert.True(t, layer.TrainJobOptedOut, "the TrainJob's opt-out reaches its pods")

	missing := func(context.Context, string, string) (map[string]string, bool, error) { return nil, false, nil }
	pod := trainerPod(map[string]string{"a": "b"})
	for name, lookup := range map[string]TrainJobLookup{"no TrainJob": missing, "no lookup": nil} {
		layer, err = LayerOf(t.Context(), podKind, pod, "team-a", lookup)
		require.NoError(t, err)
		assert.Equal(t, Layer{Annotations: map[string]string{"a": "b"}}, layer, name)
	}

	failing := func(context.Context, string, string) (map[string]string, bool, error) {
		return nil, false, errors.New("forbidden")
	}
	_, err = LayerOf(t.Context(), podKind, pod, "team-a", failing)
	require.ErrorContains(t, err, "reading TrainJob team-a/llm named by the pod's jobset.sigs.k8s.io/jobset-name label: forbidden")
}
