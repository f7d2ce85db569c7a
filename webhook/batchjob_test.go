package webhook

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

// injectAs runs the offline injector (the webhook's code) on one object.
func injectAs[T any](t *testing.T, raw []byte) (*T, Result) {
	t.Helper()
	off := NewOffline(goldenConfig(t))
	res, err := off.Injector.Inject(t.Context(), Request{GVK: gvkOf(t, raw), Namespace: "team-a", Raw: raw, OptedIn: true})
	require.NoError(t, err)
	out, _, err := off.InjectDocument(t.Context(), raw)
	require.NoError(t, err)
	obj := new(T)
	require.NoError(t, yaml.Unmarshal(out, obj))
	return obj, res
}

func gvkOf(t *testing.T, raw []byte) schema.GroupVersionKind {
	t.Helper()
	var tm metav1.TypeMeta
	require.NoError(t, yaml.Unmarshal(raw, &tm))
	return tm.GroupVersionKind()
}

// podOfJob is the pod the Job controller makes of job's template.
func podOfJob(job *batchv1.Job, index string) *builders.PodWrapper {
	return builders.MakePod(job.Namespace, job.Name+"-"+index+"-abcde").With(func(p *corev1.Pod) {
		p.Labels = job.Spec.Template.Labels
		p.Annotations = job.Spec.Template.Annotations
		p.Spec = *job.Spec.Template.Spec.DeepCopy()
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name,
			UID: "00000000-0000-0000-0000-000000000002", Controller: builders.Ptr(true)}}
	}).WithLabel(batchv1.JobNameLabel, job.Name).WithLabel(batchv1.JobCompletionIndexAnnotation, index)
}

// A user's Job is injected at its admission, and its pods only get the
// per-pod decisions: the chain must not run twice (one agent installer,
// one preStop, one checkpoint mount).
func TestBatchJobIsInjectedOnceAtTheJob(t *testing.T) {
	job, res := injectAs[batchv1.Job](t, builders.MakeBatchJob("team-a", "ranks").JSON())
	require.Empty(t, res.Skipped)
	require.True(t, contract.Injected(job.Spec.Template.Annotations), "the Job's template carries trainguard's changes")
	assert.Equal(t, "job.batch/$("+contract.EnvBatchJobName+")", envOf(&job.Spec.Template.Spec.Containers[0], contract.EnvCheckpointKey),
		"the checkpoint directory is the Job's, whichever pod of it runs")

	pod, res := injectAs[corev1.Pod](t, podOfJob(job, "1").JSON())
	require.Empty(t, res.Skipped)
	assert.Len(t, pod.Spec.InitContainers, 1, "one agent installer")
	assert.Equal(t, job.Spec.Template.Spec.Containers[0].Env, pod.Spec.Containers[0].Env[:len(job.Spec.Template.Spec.Containers[0].Env)],
		"the template's env is kept, not injected again")
	mounts := 0
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == contract.CheckpointVolumeName {
			mounts++
		}
	}
	assert.Equal(t, 1, mounts)
}

// Jobs a CronJob or a JobSet (a TrainJob's) make are their controller's:
// the Job is left unchanged, and its pods are injected as pods, exactly as
// before batch Jobs were a kind.
func TestControlledBatchJobsKeepPodLevelInjection(t *testing.T) {
	for _, owner := range []struct{ apiVersion, kind string }{{"batch/v1", "CronJob"}, {"jobset.x-k8s.io/v1alpha2", "JobSet"}} {
		t.Run(owner.kind, func(t *testing.T) {
			w := builders.MakeBatchJob("team-a", "made").ControlledBy(owner.apiVersion, owner.kind, "parent")
			job, res := injectAs[batchv1.Job](t, w.JSON())
			assert.Contains(t, res.Skipped, "controlled by "+owner.kind+" parent")
			assert.Empty(t, res.Patch)
			assert.False(t, contract.Injected(job.Spec.Template.Annotations))

			pod, res := injectAs[corev1.Pod](t, podOfJob(job, "0").JSON())
			require.Empty(t, res.Skipped, "a pod of another controller's Job is a training pod like any")
			assert.True(t, contract.Injected(pod.Annotations))
			assert.Equal(t, "job/made", envOf(&pod.Spec.Containers[0], contract.EnvCheckpointKey), "its directory is named after its owner, as before")
		})
	}
}
