package builders

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
)

// TestKubeflowOperatorPods: the tests' job pods are what the training
// operator makes of a job's templates: one per replica, named and ranked
// as it names and ranks them, owned by the job, with the replica's restart
// policy (ExitCode becomes Never, unset the operator's OnFailure).
func TestKubeflowOperatorPods(t *testing.T) {
	job := MakeKubeflowJob("ns", "j").WithWorker(63).Realistic().
		WithReplica(kubeflowv1.ReplicaWorker, func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = "ExitCode" }).Obj()
	job.UID = "uid-1"

	pods := KubeflowOperatorPods(job, job)
	require.Len(t, pods, 64)
	env := func(p *corev1.Pod, name string) string {
		for _, e := range p.Spec.Containers[0].Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	master, last := pods[0], pods[63]
	assert.Equal(t, "j-master-0", master.Name)
	assert.Equal(t, "master", master.Labels["training.kubeflow.org/job-role"])
	assert.Equal(t, corev1.RestartPolicyOnFailure, master.Spec.RestartPolicy, "unset: the operator's default")
	assert.Equal(t, "j-worker-62", last.Name)
	assert.Equal(t, corev1.RestartPolicyNever, last.Spec.RestartPolicy, "ExitCode runs its pods with Never")
	assert.Equal(t, "63", env(last, "RANK"))
	assert.Equal(t, "64", env(last, "WORLD_SIZE"))
	assert.Equal(t, "j-master-0", env(last, "MASTER_ADDR"))
	assert.Equal(t, "j", last.Labels[kubeflowv1.LabelJobName])
	assert.Equal(t, "62", last.Labels["training.kubeflow.org/replica-index"])
	require.Len(t, last.OwnerReferences, 1)
	assert.Equal(t, "uid-1", string(last.OwnerReferences[0].UID))
	assert.True(t, *last.OwnerReferences[0].Controller)
	assert.Greater(t, len(MustJSON(last)), 7000, "the realistic spec, about 8 KB")
	assert.Equal(t, corev1.RestartPolicyAlways, KubeflowOperatorRestartPolicy("Always"))
}
