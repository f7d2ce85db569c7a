package webhook

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

// The pods an operator makes of an injected job's templates pass the pod
// webhook with no patch: every injection, the in-place restarts included,
// is in the template already. A patch, even an empty-looking one, makes the
// API server apply it and run the whole mutating chain a second time for
// each pod, which is most of what trainguard added to a job's admission
// (docs/scale.md). The pods still restart every process fault in place,
// under every replica restartPolicy kubeflow has.
func TestPodsOfAnInjectedJobNeedNoPatch(t *testing.T) {
	for _, policy := range []string{"", "OnFailure", "ExitCode", "Never", "Always"} {
		w := builders.MakeKubeflowJob("team-a", "ranks").WithWorker(3).Realistic().
			WithReplica(kubeflowv1.ReplicaWorker, func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = policy })
		job, res := injectAs[kubeflowv1.PyTorchJob](t, w.JSON())
		require.Empty(t, res.Skipped)
		job.UID = "00000000-0000-0000-0000-000000000003"
		for _, p := range builders.KubeflowOperatorPods(job, job) {
			p.APIVersion, p.Kind = "v1", "Pod"
			_, res := injectAs[corev1.Pod](t, builders.MustJSON(p))
			require.Empty(t, res.Skipped, p.Name)
			assert.Empty(t, res.Patch, "replica restartPolicy %q, pod %s (%s): nothing left to do per pod", policy, p.Name, p.Spec.RestartPolicy)
			for _, code := range contract.ProcessFaultExitCodes() {
				assert.True(t, contract.RestartsInPlace(&p.Spec, "pytorch", code), "replica restartPolicy %q, pod %s: exit %d restarts in place", policy, p.Name, code)
			}
			assert.Equal(t, p.Spec.RestartPolicy == corev1.RestartPolicyNever, !contract.RestartsInPlace(&p.Spec, "pytorch", 1),
				"replica restartPolicy %q: exit 1 is the operator's", policy)
		}
	}

	job, _ := injectAs[batchv1.Job](t, builders.MakeBatchJob("team-a", "ranks").JSON())
	_, res := injectAs[corev1.Pod](t, podOfJob(job, "0").JSON())
	assert.Empty(t, res.Patch, "a batch Job's pod: its template's restartPolicy is the pod's")
}

// kubeflow's released operators are built against a Kubernetes API before
// 1.34: their Go types drop the template's restartPolicyRules and keep the
// container's restartPolicy. Their pods get the rules back from the pod
// webhook (a patch, as before templates carried them) and restart every
// process fault in place.
func TestPodsOfAnOldOperatorGetTheRulesBack(t *testing.T) {
	w := builders.MakeKubeflowJob("team-a", "ranks").
		WithReplica(kubeflowv1.ReplicaWorker, func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = kubeflowv1.RestartPolicyExitCode })
	job, _ := injectAs[kubeflowv1.PyTorchJob](t, w.JSON())
	p := builders.KubeflowOperatorPods(job, job)[1]
	p.APIVersion, p.Kind = "v1", "Pod"
	require.NotNil(t, p.Spec.Containers[0].RestartPolicy)
	p.Spec.Containers[0].RestartPolicyRules = nil
	got, res := injectAs[corev1.Pod](t, builders.MustJSON(p))
	assert.NotEmpty(t, res.Patch)
	assert.Equal(t, contract.InPlaceRestartRules(), got.Spec.Containers[0].RestartPolicyRules)
	for _, code := range contract.ProcessFaultExitCodes() {
		assert.True(t, contract.RestartsInPlace(&got.Spec, "pytorch", code), "exit %d restarts in place", code)
	}
}
