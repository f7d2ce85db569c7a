package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

// A PyTorchJob's pods, made as kubeflow's operator makes them of the
// templates the API server stored, pass trainguard without a patch and
// still restart every process fault in place: kubeflow's CRD keeps the
// container restart rules trainguard put into an ExitCode replica's
// template (a schema without the fields would prune them, and every pod
// would need its patch again).
func TestPodsOfAnInjectedPyTorchJobPassUnpatched(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	u := &unstructured.Unstructured{}
	require.NoError(t, u.UnmarshalJSON(builders.MakeKubeflowJob(ns, "exitcode").WithWorker(3).
		WithReplica(kubeflowv1.ReplicaWorker, func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = kubeflowv1.RestartPolicyExitCode }).JSON()))
	require.NoError(t, env.c.Create(ctx, u))
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(u), u))
	var job kubeflowv1.PyTorchJob
	require.NoError(t, runtimeConvert(u.Object, &job))
	worker := job.Spec.PyTorchReplicaSpecs[kubeflowv1.ReplicaWorker].Template.Spec.Containers[0]
	assert.Equal(t, contract.InPlaceRestartRules(), worker.RestartPolicyRules, "the stored template keeps the rules")
	require.NotNil(t, worker.RestartPolicy)
	assert.Equal(t, corev1.ContainerRestartPolicyNever, *worker.RestartPolicy)

	patched, all := mutatePodDecisions(t, "patched"), mutatePodCalls(t)
	pods := builders.KubeflowOperatorPods(&job, &job)
	for _, p := range pods {
		require.NoError(t, env.c.Create(ctx, p))
	}
	assert.GreaterOrEqual(t, mutatePodCalls(t)-all, float64(len(pods)), "every pod went through trainguard")
	assert.Zero(t, mutatePodDecisions(t, "patched")-patched, "no pod needed a patch")
	for _, p := range pods {
		var got corev1.Pod
		require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(p), &got))
		for _, code := range contract.ProcessFaultExitCodes() {
			assert.True(t, contract.RestartsInPlace(&got.Spec, "pytorch", code), "%s: exit %d restarts in place", got.Name, code)
		}
		assert.Equal(t, got.Spec.RestartPolicy == corev1.RestartPolicyNever, !contract.RestartsInPlace(&got.Spec, "pytorch", 1), "%s: exit 1 is the operator's", got.Name)
	}
}

// A batch Job's template (restartPolicy Never) is stored with the rules:
// the Job's validation accepts a container restartPolicy and its rules in
// a pod template (ContainerRestartRules, on by default since 1.35).
func TestBatchJobTemplateKeepsTheRestartRules(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	job := builders.MakeBatchJob(ns, "ranks").Obj()
	require.NoError(t, env.c.Create(ctx, job))
	var got batchv1.Job
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(job), &got))
	c := got.Spec.Template.Spec.Containers[0]
	assert.Equal(t, contract.InPlaceRestartRules(), c.RestartPolicyRules)
	for _, code := range contract.ProcessFaultExitCodes() {
		assert.True(t, contract.RestartsInPlace(&got.Spec.Template.Spec, c.Name, code), "exit %d restarts in place", code)
	}
}
