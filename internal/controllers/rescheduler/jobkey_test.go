package rescheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/jobs"
)

func TestJobKeyOf(t *testing.T) {
	kubeflow := keyOf(newPod())
	assert.Equal(t, jobs.Key{Namespace: "team", APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "job"}, kubeflow)
	byLabel := keyOf(newPod(func(p *corev1.Pod) { p.OwnerReferences = nil }))
	assert.Equal(t, RecordName(kubeflow), RecordName(byLabel), "label fallback finds the same record")

	kubedl := keyOf(newPod(func(p *corev1.Pod) {
		p.OwnerReferences = nil
		p.Labels = map[string]string{kubeflowv1.LabelLegacyJobName: "job", kubeflowv1.LabelGroupName: "training.kubedl.io"}
	}))
	assert.Equal(t, "training.kubedl.io/v1alpha1", kubedl.APIVersion)
	assert.NotEqual(t, RecordName(kubeflow), RecordName(kubedl), "same name, different kind of job")

	barePod := keyOf(newPod(bare, func(p *corev1.Pod) { p.Name = "job" }))
	assert.True(t, barePod.Bare())
	assert.NotEqual(t, RecordName(kubeflow), RecordName(barePod))

	long := keyOf(newPod(func(p *corev1.Pod) { p.OwnerReferences[0].Name = string(make([]byte, 300)) }))
	assert.LessOrEqual(t, len(RecordName(long)), 253)
	// Non-controller owners do not make a job.
	notController := keyOf(newPod(func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}}
	}))
	assert.True(t, notController.Bare())
}

func TestRequireNotOnNodesMergesIntoEveryTerm(t *testing.T) {
	spec := &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100"}}}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: hostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"z"}}}},
		}},
	}}}
	podspec.RequireNotOnNodes(spec, []string{"b", "a"})
	podspec.RequireNotOnNodes(spec, []string{"a"}) // idempotent
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	assert.Equal(t, []corev1.NodeSelectorRequirement{
		{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100"}},
		{Key: hostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a", "b"}},
	}, terms[0].MatchExpressions)
	assert.Equal(t, []corev1.NodeSelectorRequirement{
		{Key: hostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a", "b", "z"}},
	}, terms[1].MatchExpressions)

	empty := &corev1.PodSpec{}
	podspec.RequireNotOnNodes(empty, nil)
	assert.Nil(t, empty.Affinity, "no bad node, no affinity")
}

// hostnameLabel is the node label the anti-affinity matches.
const hostnameLabel = "kubernetes.io/hostname"
