package outcome

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainguard/trainguard/internal/controllers/outcome"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

// A Kubeflow Trainer v2 pod's outcome reaches its TrainJob through the
// chain Trainer and JobSet build: TrainJob -> JobSet -> Job -> Pod.
func TestTrainJobGetsTheEvent(t *testing.T) {
	ns := namespace(t, true)
	tj := trainJob(t, ns, "llm")
	js := jobSet(t, ns, "llm", controllerRef(tj))
	job := batchJob(t, ns, "llm-node-0", ptr.To(controllerRef(js)))
	pod := trainerPod(t, ns, "llm", jobRef(job))
	terminateContainer(t, pod, "node", contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 300, Bytes: 2 << 30, Seconds: 7.5}.Line(), false)

	ev := waitEvent(t, ns, pod.UID, outcome.ReasonSaved)
	assert.Equal(t, "container node: checkpoint saved at step 300 (2.0 GiB) in 7.5s", ev.Note)
	require.NotNil(t, ev.Related, "the pod's Event names its TrainJob")
	assert.Equal(t, tj.GetUID(), ev.Related.UID)
	assert.Equal(t, "TrainJob", ev.Related.Kind)

	tjEv := waitEvent(t, ns, tj.GetUID(), outcome.ReasonSaved)
	assert.Equal(t, "trainer.kubeflow.org/v1alpha1", tjEv.Regarding.APIVersion)
	assert.Equal(t, "TrainJob", tjEv.Regarding.Kind)
	assert.Equal(t, "llm", tjEv.Regarding.Name)
	assert.Equal(t, "pod "+pod.Name+": container node: checkpoint saved at step 300 (2.0 GiB) in 7.5s", tjEv.Note)
	require.NotNil(t, tjEv.Related)
	assert.Equal(t, pod.UID, tjEv.Related.UID)
	assert.Empty(t, eventsOf(t, ns, js.GetUID()), "the intermediate JobSet gets no Event")
	assert.Empty(t, eventsOf(t, ns, job.UID), "the intermediate Job gets no Event")
}

// Owner references are the tenant's to write. A chain that does not lead,
// UID by UID and controller by controller, from the pod to a TrainJob in the
// pod's own namespace gives the pod its Event and nothing else one.
func TestForgedTrainJobChainGetsNoJobEvent(t *testing.T) {
	cases := map[string]func(t *testing.T, ns string) (pod *corev1.Pod, bystanders []types.UID){
		// The pod names the real Job, with another UID.
		"Job UID forged": func(t *testing.T, ns string) (*corev1.Pod, []types.UID) {
			tj := trainJob(t, ns, "victim")
			js := jobSet(t, ns, "victim", controllerRef(tj))
			job := batchJob(t, ns, "victim-node-0", ptr.To(controllerRef(js)))
			ref := jobRef(job)
			ref.UID = types.UID("00000000-0000-0000-0000-000000000001")
			return trainerPod(t, ns, "victim", ref), []types.UID{tj.GetUID(), js.GetUID(), job.UID}
		},
		// The JobSet names a TrainJob (name and UID) of another namespace;
		// one of the same name in the pod's namespace has another UID.
		"TrainJob in another namespace": func(t *testing.T, ns string) (*corev1.Pod, []types.UID) {
			far := trainJob(t, namespace(t, true), "far")
			decoy := trainJob(t, ns, "far")
			js := jobSet(t, ns, "far", controllerRef(far))
			job := batchJob(t, ns, "far-node-0", ptr.To(controllerRef(js)))
			return trainerPod(t, ns, "far", jobRef(job)), []types.UID{far.GetUID(), decoy.GetUID(), js.GetUID(), job.UID}
		},
		// The JobSet's controller is a PyTorchJob, not a TrainJob; a
		// TrainJob the pod's labels name exists, but is not in the chain.
		"JobSet not owned by a TrainJob": func(t *testing.T, ns string) (*corev1.Pod, []types.UID) {
			pj := pytorchJob(t, ns, "pj")
			tj := trainJob(t, ns, "pj")
			js := jobSet(t, ns, "pj", controllerRef(pj))
			job := batchJob(t, ns, "pj-node-0", ptr.To(controllerRef(js)))
			return trainerPod(t, ns, "pj", jobRef(job)), []types.UID{pj.GetUID(), tj.GetUID(), js.GetUID(), job.UID}
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t, true)
			pod, bystanders := build(t, ns)
			terminateContainer(t, pod, "node", contract.CheckpointOutcome{Outcome: contract.OutcomeTimeout, Step: 1, Seconds: 60}.Line(), false)
			ev := waitEvent(t, ns, pod.UID, outcome.ReasonTimeout)
			assert.Nil(t, ev.Related, "no job named in the pod's Event")
			barrier(t, ns)
			for _, uid := range bystanders {
				assert.Empty(t, eventsAnywhere(t, uid), "no Event on %s, in any namespace", uid)
			}
		})
	}
}

// A user's own batch Job (no controller) is a job of its own:
// its pod's outcome is its Event, whatever TrainJob the pod's labels claim.
func TestPlainJobGetsTheEventNotTheTrainJobItsPodClaims(t *testing.T) {
	ns := namespace(t, true)
	tj := trainJob(t, ns, "plain")
	job := batchJob(t, ns, "plain-node-0", nil)
	pod := trainerPod(t, ns, "plain", jobRef(job))
	terminateContainer(t, pod, "node", contract.CheckpointOutcome{Outcome: contract.OutcomeTimeout, Step: 1, Seconds: 60}.Line(), false)
	ev := waitEvent(t, ns, pod.UID, outcome.ReasonTimeout)
	require.NotNil(t, ev.Related, "the pod's Event names its Job")
	assert.Equal(t, job.UID, ev.Related.UID)
	jobEv := waitEvent(t, ns, job.UID, outcome.ReasonTimeout)
	assert.Equal(t, "Job", jobEv.Regarding.Kind)
	barrier(t, ns)
	assert.Empty(t, eventsAnywhere(t, tj.GetUID()), "the TrainJob the labels claim gets nothing")
}

// ---- the objects Trainer and JobSet would create, owned as they own them.

func trainJob(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	return create(t, builders.MakeTrainJob(ns, name).Unstructured())
}

// jobSet is the JobSet of a TrainJob: its name, one replicated job "node".
func jobSet(t *testing.T, ns, name string, owner metav1.OwnerReference) *unstructured.Unstructured {
	t.Helper()
	return create(t, builders.MakeJobSet(ns, name).WithOwner(owner).Unstructured())
}

func create(t *testing.T, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	require.NoError(t, env.c.Create(context.Background(), u))
	return u
}

// batchJob is the Job JobSet creates for a replicated job's index.
func batchJob(t *testing.T, ns, name string, owner *metav1.OwnerReference) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "node", Image: "example.com/train:1"}},
		}}},
	}
	if owner != nil {
		job.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	require.NoError(t, env.c.Create(context.Background(), job))
	return job
}

// trainerPod is the pod the Job controller creates for a TrainJob's trainer:
// JobSet's labels, Trainer's container node, the Job as controller. The
// pod webhook injects it because a TrainJob of the labels' name exists.
func trainerPod(t *testing.T, ns, jobSetName string, job metav1.OwnerReference) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: job.Name + "-abcde",
			Labels: map[string]string{
				"jobset.sigs.k8s.io/jobset-name":        jobSetName,
				"jobset.sigs.k8s.io/replicatedjob-name": "node",
				"jobset.sigs.k8s.io/job-index":          "0",
			},
			OwnerReferences: []metav1.OwnerReference{job},
		},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "node", Image: "example.com/train:1"}}},
	}
	require.NoError(t, env.c.Create(context.Background(), pod))
	require.Equal(t, "true", pod.Labels[contract.LabelManaged], "the pod webhook injected the TrainJob's pod")
	return pod
}

// eventsAnywhere lists the reader's Events about uid in every namespace: an
// Event is created in its object's namespace, which for a forged chain may
// not be the pod's.
func eventsAnywhere(t *testing.T, uid types.UID) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	require.NoError(t, env.c.List(context.Background(), &list))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.UID == uid && e.ReportingController == outcome.ControllerName {
			out = append(out, e)
		}
	}
	return out
}

func controllerRef(o *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Name: o.GetName(), UID: o.GetUID(), Controller: ptr.To(true)}
}

func jobRef(job *batchv1.Job) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}
}
