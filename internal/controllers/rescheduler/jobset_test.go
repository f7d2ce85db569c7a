package rescheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/jobs"
)

func jobSetPod(jobSet, rjob, idx, owner string) *corev1.Pod {
	ctrl := true
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: owner + "-x",
		Labels:          map[string]string{trainerv1alpha1.LabelJobSetName: jobSet, trainerv1alpha1.LabelJobSetReplicatedJob: rjob, trainerv1alpha1.LabelJobSetJobIndex: idx},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: owner, Controller: &ctrl}}}}
}

func TestJobSetPodsShareTheirJobSetsKey(t *testing.T) {
	a := keyOf(jobSetPod("llm", "node", "0", "llm-node-0"))
	b := keyOf(jobSetPod("llm", "node", "1", "llm-node-1"))
	assert.Equal(t, jobs.Key{Namespace: "team-a", APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "llm"}, a)
	assert.Equal(t, RecordName(a), RecordName(b), "every Job of a JobSet shares one bad-node record")
}

func TestJobSetLabelsMustAgreeWithTheOwner(t *testing.T) {
	for name, pod := range map[string]*corev1.Pod{
		"claims another JobSet": jobSetPod("victim", "node", "0", "llm-node-0"),
		"bad index":             jobSetPod("llm", "node", "x", "llm-node-x"),
		"invalid name":          jobSetPod("../x", "node", "0", "../x-node-0"),
	} {
		k := keyOf(pod)
		assert.Equal(t, "Job", k.Kind, "%s: falls back to the owning Job", name)
	}
	bare := jobSetPod("llm", "node", "0", "llm-node-0")
	bare.OwnerReferences = nil
	assert.True(t, keyOf(bare).Bare(), "labels without an owner make a bare pod")
}
