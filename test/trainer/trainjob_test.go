package trainer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

var nsCounter atomic.Int64 // unique namespace names across tests.

func namespace(t *testing.T, optIn bool) string {
	t.Helper()
	name := fmt.Sprintf("tj-%d", nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if optIn {
		ns.Annotations = map[string]string{contract.AnnotationInject: contract.InjectEnabled}
	}
	require.NoError(t, env.c.Create(context.Background(), ns))
	return name
}

func apply(t *testing.T, doc string) error {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
	return env.c.Create(context.Background(), u)
}

// torchDistributed is a runtime shaped like Trainer's torch-distributed
// (manifests/base/runtimes) of the release under test, written for this
// suite: up to v2.1 its torch policy sets numProcPerNode: auto, which v2.2
// removed (a TrainJob sets it, auto by default).
func torchDistributed(name string) string {
	torch := "{}"
	if env.rel.torchV20 {
		torch = "{numProcPerNode: auto}"
	}
	return `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: ` + name + `}
spec:
  mlPolicy:
    numNodes: 1
    torch: ` + torch + `
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
                  containers:
                    - name: node
                      image: example.com/pytorch:2.7.1
                      command: [torchrun, /workspace/train.py]
`
}

func trainJob(ns, name, runtime, annotations string) string {
	return `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  annotations: {` + annotations + `}
spec:
  runtimeRef: {name: ` + runtime + `}
  trainer: {numNodes: 2}
`
}

// jobOf waits for the batch Job JobSet creates for the TrainJob's trainer.
func jobOf(t *testing.T, ns, trainJob string) *batchv1.Job {
	t.Helper()
	var job batchv1.Job
	require.Eventually(t, func() bool {
		var list batchv1.JobList
		if env.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{trainerv1alpha1.LabelJobSetName: trainJob}) != nil || len(list.Items) == 0 {
			return false
		}
		job = list.Items[0]
		return true
	}, 60*time.Second, 200*time.Millisecond, "Trainer and JobSet must create the trainer Job of TrainJob %s/%s", ns, trainJob)
	return &job
}

// podOfJob creates the pod the Job controller would create for index i:
// the Job's pod template, its completion index, owned by the Job. The API
// server sends it through trainguard's pod webhook.
func podOfJob(t *testing.T, job *batchv1.Job, i int, mutate ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	tpl := job.Spec.Template.DeepCopy()
	idx := strconv.Itoa(i)
	pod := &corev1.Pod{ObjectMeta: tpl.ObjectMeta, Spec: tpl.Spec}
	pod.Namespace, pod.GenerateName = job.Namespace, job.Name+"-"+idx+"-"
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Labels[batchv1.JobCompletionIndexAnnotation] = idx
	pod.Labels["batch.kubernetes.io/job-name"] = job.Name
	pod.Annotations[batchv1.JobCompletionIndexAnnotation] = idx
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
	for _, m := range mutate {
		m(pod)
	}
	require.NoError(t, env.c.Create(context.Background(), pod))
	return pod
}

func nodeContainer(t *testing.T, pod *corev1.Pod) corev1.Container {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		if c.Name == "node" {
			return c
		}
	}
	t.Fatalf("pod %s has no node container", pod.Name)
	return corev1.Container{}
}

func TestTrainJobPodsAreInjected(t *testing.T) {
	ns := namespace(t, true)
	require.NoError(t, apply(t, torchDistributed("torch-distributed-"+ns)))
	require.NoError(t, apply(t, trainJob(ns, "mnist", "torch-distributed-"+ns, `trainguard.io/gpu-limit: "2"`)))
	job := jobOf(t, ns, "mnist")
	assert.Equal(t, int32(2), *job.Spec.Parallelism, "Trainer sized the Job from numNodes")
	assert.Empty(t, job.Spec.Template.Annotations[contract.AnnotationInjected], "trainguard does not touch the Job's template: it injects pods")
	for i := range 2 {
		pod := podOfJob(t, job, i)
		c := nodeContainer(t, pod)
		require.NotNil(t, c.Lifecycle, "pod %d: preStop hook", i)
		assert.NotNil(t, c.Lifecycle.PreStop)
		assert.Contains(t, ports(c), contract.TaskDPortName)
		assert.Equal(t, "2", c.Resources.Limits.Name("nvidia.com/gpu", "").String(), "the TrainJob's gpu-limit annotation reached its pod")
		assert.Equal(t, "true", pod.Labels[contract.LabelManaged])
		assert.Contains(t, pod.Annotations[contract.AnnotationInjected], "prestop")
		assert.NotEmpty(t, pod.Annotations[contract.AnnotationMindClusterRecoverStrategy])
		assert.NotEmpty(t, pod.Spec.InitContainers, "the agent installer")
	}
}

func TestOptedOutTrainJobAndSpoofedLabels(t *testing.T) {
	ns := namespace(t, true)
	require.NoError(t, apply(t, torchDistributed("torch-quiet-"+ns)))
	require.NoError(t, apply(t, trainJob(ns, "quiet", "torch-quiet-"+ns, `trainguard.io/inject: disabled`)))
	pod := podOfJob(t, jobOf(t, ns, "quiet"), 0)
	assert.NotContains(t, pod.Annotations, contract.AnnotationInjected, "the TrainJob's opt-out holds for its pods")
	assert.Nil(t, nodeContainer(t, pod).Lifecycle)
	widened := podOfJob(t, jobOf(t, ns, "quiet"), 1, func(p *corev1.Pod) { p.Annotations[contract.AnnotationInject] = contract.InjectEnabled })
	assert.NotContains(t, widened.Annotations, contract.AnnotationInjected, "a pod annotation never widens its TrainJob's opt-out")

	// A pod whose labels name a TrainJob that does not exist is not a
	// TrainJob pod: labels alone opt nothing in.
	spoof := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "spoof", Namespace: ns, Labels: map[string]string{
		trainerv1alpha1.LabelJobSetName: "ghost", trainerv1alpha1.LabelJobSetReplicatedJob: "node"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node", Image: "example.com/x:1"}}}}
	require.NoError(t, env.c.Create(context.Background(), spoof))
	assert.NotContains(t, spoof.Annotations, contract.AnnotationInjected)

	// Nor does a TrainJob of another namespace count.
	other := namespace(t, true)
	spoof2 := spoof.DeepCopy()
	spoof2.Namespace, spoof2.Name, spoof2.ResourceVersion, spoof2.UID = other, "spoof-quiet", "", ""
	spoof2.Labels[trainerv1alpha1.LabelJobSetName] = "mnist"
	require.NoError(t, env.c.Create(context.Background(), spoof2))
	assert.NotContains(t, spoof2.Annotations, contract.AnnotationInjected)
}

func TestTrainerKindsAreValidated(t *testing.T) {
	ns := namespace(t, true)
	require.NoError(t, apply(t, torchDistributed("torch-v-"+ns)))
	// A value trainguard refuses that the served API's schema admits:
	// up to v2.1 numProcPerNode is an int or a string, from v2.2 an int.
	bad, zero := "npu", `"0"`
	if !env.rel.torchV20 {
		bad, zero = "0", "0"
	}
	err := apply(t, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: bad-nproc, namespace: `+ns+`}
spec:
  runtimeRef: {name: torch-v-`+ns+`}
  trainer: {numProcPerNode: `+bad+`}
`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "trainjobs.validate.trainguard.io")
	assert.Contains(t, err.Error(), "spec.trainer.numProcPerNode")

	err = apply(t, trainJob(ns, "missing", "no-such-runtime", ""))
	require.Error(t, err, "the runtime is read live: a missing one is refused as Trainer refuses it")
	assert.Contains(t, err.Error(), "spec.runtimeRef")

	// Outside opted-in namespaces trainguard validates nothing.
	plain := namespace(t, false)
	require.NoError(t, apply(t, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: other, namespace: `+plain+`}
spec:
  runtimeRef: {name: torch-v-`+ns+`}
  trainer: {numProcPerNode: `+zero+`}
`))
}

func ports(c corev1.Container) []string {
	var out []string
	for _, p := range c.Ports {
		out = append(out, p.Name)
	}
	return out
}

// TestTrainJobPolicyHoldsAtValidation: a TrainJob that turns TaskD off may
// use port 9601 itself; its pod is injected without TaskD and the pod
// validator, reading the same TrainJob, admits it.
func TestTrainJobPolicyHoldsAtValidation(t *testing.T) {
	ns := namespace(t, true)
	rt := strings.Replace(torchDistributed("torch-9601-"+ns), `command: [torchrun, /workspace/train.py]`,
		`command: [torchrun, /workspace/train.py]
                      ports: [{name: metrics, containerPort: 9601}]`, 1)
	require.NoError(t, apply(t, rt))
	require.NoError(t, apply(t, trainJob(ns, "metrics", "torch-9601-"+ns, `trainguard.io/taskd: disabled`)))
	pod := podOfJob(t, jobOf(t, ns, "metrics"), 0)
	assert.Contains(t, pod.Annotations[contract.AnnotationInjected], "prestop")
	assert.NotContains(t, ports(nodeContainer(t, pod)), contract.TaskDPortName)
}
