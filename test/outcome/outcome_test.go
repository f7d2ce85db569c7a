package outcome

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainguard/trainguard/internal/controllers/outcome"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

const (
	waitFor = 15 * time.Second
	tick    = 25 * time.Millisecond
)

var nsCounter atomic.Int64 // unique namespace names across tests.

// Each outcome the agent can report ends up as an Event on the pod and on
// its PyTorchJob, with the matching reason, and in the metrics.
func TestEachOutcomeBecomesEventsAndMetrics(t *testing.T) {
	ns := namespace(t, true)
	cases := []struct {
		o      contract.CheckpointOutcome
		reason string
		typ    string
		note   string
	}{
		{contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 1200, Bytes: 3 << 30, Seconds: 12.5}, outcome.ReasonSaved, "Normal", "checkpoint saved at step 1200 (3.0 GiB) in 12.5s"},
		{contract.CheckpointOutcome{Outcome: contract.OutcomeTimeout, Step: 800, Seconds: 60}, outcome.ReasonTimeout, "Warning", "checkpoint not acknowledged within 60.0s"},
		{contract.CheckpointOutcome{Outcome: contract.OutcomeNoTrainer, Seconds: 0.2}, outcome.ReasonNoTrainer, "Warning", "no trainer was listening"},
		{contract.CheckpointOutcome{Outcome: contract.OutcomeFailed, Step: 5, Seconds: 3}, outcome.ReasonFailed, "Warning", "checkpoint failed after 3.0s"},
	}
	for i, tc := range cases {
		t.Run(tc.o.Outcome, func(t *testing.T) {
			job := pytorchJob(t, ns, fmt.Sprintf("job-%d", i))
			pod := workerOf(t, job)
			total, durCount, durSum := counter(t, outcome.MetricTotal, tc.o.Outcome), histCount(t, outcome.MetricDuration, tc.o.Outcome), histSum(t, outcome.MetricDuration, tc.o.Outcome)
			bytesCount := histCount(t, outcome.MetricBytes, "")
			terminate(t, pod, "user: shutting down\n"+tc.o.Line()+"\n", false)

			ev := waitEvent(t, ns, pod.UID, tc.reason)
			assert.Equal(t, tc.typ, ev.Type)
			assert.Equal(t, outcome.EventAction, ev.Action)
			assert.Contains(t, ev.Note, "container pytorch: "+tc.note)
			require.NotNil(t, ev.Related, "the pod's Event names its job")
			assert.Equal(t, job.GetUID(), ev.Related.UID)

			jobEv := waitEvent(t, ns, job.GetUID(), tc.reason)
			assert.Equal(t, "PyTorchJob", jobEv.Regarding.Kind)
			assert.Equal(t, "kubeflow.org/v1", jobEv.Regarding.APIVersion)
			assert.Contains(t, jobEv.Note, "pod "+pod.Name+": container pytorch: "+tc.note)

			require.Eventually(t, func() bool { return counter(t, outcome.MetricTotal, tc.o.Outcome) == total+1 }, waitFor, tick)
			assert.Equal(t, durCount+1, histCount(t, outcome.MetricDuration, tc.o.Outcome))
			assert.InDelta(t, durSum+tc.o.Seconds, histSum(t, outcome.MetricDuration, tc.o.Outcome), 1e-9)
			wantBytes := bytesCount
			if tc.o.Outcome == contract.OutcomeSaved {
				wantBytes++
			}
			assert.Equal(t, wantBytes, histCount(t, outcome.MetricBytes, ""), "bytes are observed for saved checkpoints only")
		})
	}
}

// KubeDL's PyTorchJob gets the Event too.
func TestKubeDLJobGetsTheEvent(t *testing.T) {
	ns := namespace(t, true)
	job := jobOf(t, "training.kubedl.io/v1alpha1", ns, "dl")
	pod := workerOf(t, job)
	terminate(t, pod, contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 9, Bytes: 1 << 20, Seconds: 4}.Line(), false)
	ev := waitEvent(t, ns, job.GetUID(), outcome.ReasonSaved)
	assert.Equal(t, "training.kubedl.io/v1alpha1", ev.Regarding.APIVersion)
	assert.Equal(t, "pod dl-worker-0: container pytorch: checkpoint saved at step 9 (1.0 MiB) in 4.0s", ev.Note)
}

// A termination is reported once however often the status is written; a
// restart of the container is a new termination with its own report.
func TestReportedOncePerTermination(t *testing.T) {
	ns := namespace(t, true)
	pod := barePodWith(t, ns, "once", corev1.RestartPolicyOnFailure)
	saved := contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 1, Bytes: 1 << 20, Seconds: 1}
	timeout := contract.CheckpointOutcome{Outcome: contract.OutcomeTimeout, Step: 2, Seconds: 60}
	savedBefore, timeoutBefore := counter(t, outcome.MetricTotal, contract.OutcomeSaved), counter(t, outcome.MetricTotal, contract.OutcomeTimeout)
	terminate(t, pod, saved.Line(), false)
	waitEvent(t, ns, pod.UID, outcome.ReasonSaved)
	// The kubelet writes the status again (a condition changes, say).
	setPodStatus(t, pod, func(s *corev1.PodStatus) { s.Message = "rewritten" })
	// The container restarts: the same termination moves to lastState.
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		cs := &s.ContainerStatuses[0]
		cs.LastTerminationState.Terminated, cs.State.Terminated = cs.State.Terminated, nil
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
		cs.RestartCount = 1
		s.Phase = corev1.PodRunning
	})
	barrier(t, ns)
	assert.Equal(t, savedBefore+1, counter(t, outcome.MetricTotal, contract.OutcomeSaved), "a rewritten status, or the same termination seen as lastState, is not a new checkpoint")

	// The restarted container stops again, and this time the checkpoint times out.
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		cs := &s.ContainerStatuses[0]
		cs.State.Running = nil
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error", Message: timeout.Line(), StartedAt: metav1.Now(), FinishedAt: metav1.Now()}
	})
	waitEvent(t, ns, pod.UID, outcome.ReasonTimeout)
	barrier(t, ns)
	assert.Equal(t, savedBefore+1, counter(t, outcome.MetricTotal, contract.OutcomeSaved))
	assert.Equal(t, timeoutBefore+1, counter(t, outcome.MetricTotal, contract.OutcomeTimeout))
}

// Outcomes outside opted-in namespaces are not reported: the managed label
// alone is something any tenant can put on a pod.
func TestNotOptedInIgnored(t *testing.T) {
	ns := namespace(t, false)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged", Labels: map[string]string{contract.LabelManaged: "true"}},
		Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}}},
	}
	require.NoError(t, env.c.Create(context.Background(), pod))
	before := counter(t, outcome.MetricTotal, contract.OutcomeSaved)
	terminate(t, pod, contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 1, Bytes: 1, Seconds: 1}.Line(), false)
	barrier(t, namespace(t, true))
	assert.Empty(t, eventsOf(t, ns, pod.UID), "no Event for a pod outside opted-in namespaces")
	assert.Equal(t, before, counter(t, outcome.MetricTotal, contract.OutcomeSaved))
}

// A pod whose owner reference names a job by name but with another UID (a
// tenant's forgery, or a job recreated under the same name) gets its own
// Event, and the job gets none.
func TestForgedOwnerGetsNoJobEvent(t *testing.T) {
	ns := namespace(t, true)
	job := pytorchJob(t, ns, "victim")
	b := workerSpecPod(t, job) // carries the managed label from the injected template
	b.OwnerReferences[0].UID = types.UID("00000000-0000-0000-0000-000000000001")
	require.NoError(t, env.c.Create(context.Background(), b))
	terminate(t, b, contract.CheckpointOutcome{Outcome: contract.OutcomeTimeout, Step: 1, Seconds: 60}.Line(), false)
	ev := waitEvent(t, ns, b.UID, outcome.ReasonTimeout)
	assert.Nil(t, ev.Related, "no job named in the pod's Event")
	barrier(t, ns)
	assert.Empty(t, eventsOf(t, ns, job.GetUID()), "the job whose UID does not match gets no Event")
}

// Garbage in the termination message is counted, logged and ignored:
// no Event, no outcome metric, no crash (the next good one still works).
func TestHostileMessagesIgnored(t *testing.T) {
	ns := namespace(t, true)
	hostile := []string{
		`trainguard.io/checkpoint {"outcome":"saved"`,
		`trainguard.io/checkpoint {"outcome":"pwned","step":1,"bytes":1,"seconds":1}`,
		`trainguard.io/checkpoint {"outcome":"saved","step":-1,"bytes":1,"seconds":1}`,
		`trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1e308}`,
		`trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1,"extra":"x"}`,
		`trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1}` + strings.Repeat(" ", 1000),
		"trainguard.io/checkpoint \x00\xff\xfe",
	}
	totals := map[string]float64{}
	for _, o := range contract.CheckpointOutcomes() {
		totals[o] = counter(t, outcome.MetricTotal, o)
	}
	invalid := counter(t, outcome.MetricInvalid, "")
	var pods []*corev1.Pod
	for i, msg := range hostile {
		pod := barePod(t, ns, fmt.Sprintf("hostile-%d", i))
		terminate(t, pod, msg, true)
		pods = append(pods, pod)
	}
	require.Eventually(t, func() bool { return counter(t, outcome.MetricInvalid, "") == invalid+float64(len(hostile)) }, waitFor, tick,
		"each hostile message counts once in %s", outcome.MetricInvalid)
	barrier(t, ns)
	for _, pod := range pods {
		assert.Empty(t, eventsOf(t, ns, pod.UID), "no Event for %s", pod.Name)
	}
	totals[contract.OutcomeNoTrainer]++ // the barrier's own
	for _, o := range contract.CheckpointOutcomes() {
		assert.Equal(t, totals[o], counter(t, outcome.MetricTotal, o), "outcome %s unchanged", o)
	}
}

// ---- helpers

// barrier reports one more outcome and waits for its Event: the reader has
// one worker and a FIFO queue, so what was written before is handled.
func barrier(t *testing.T, ns string) {
	t.Helper()
	pod := barePod(t, ns, fmt.Sprintf("barrier-%d", nsCounter.Add(1)))
	terminate(t, pod, contract.CheckpointOutcome{Outcome: contract.OutcomeNoTrainer, Seconds: 0.01}.Line(), false)
	waitEvent(t, ns, pod.UID, outcome.ReasonNoTrainer)
}

func namespace(t *testing.T, optIn bool) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("oc-%d", nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if optIn {
		ns.Annotations = map[string]string{contract.AnnotationInject: contract.InjectEnabled}
	}
	require.NoError(t, env.c.Create(ctx, ns))
	if !optIn {
		return name
	}
	require.Eventually(t, func() bool {
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "probe"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}}},
		}
		return env.c.Create(ctx, probe, client.DryRunAll) == nil && probe.Labels[contract.LabelManaged] == "true"
	}, waitFor, tick, "the pod webhook must inject pods in namespace %s", name)
	return name
}

func pytorchJob(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	return jobOf(t, "kubeflow.org/v1", ns, name)
}

// jobOf is one Worker restarted by exit code, under kubeflow's or KubeDL's API.
func jobOf(t *testing.T, apiVersion, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := builders.MakeKubeflowJob(ns, name).WithExitCodeWorkers(1).Unstructured()
	if apiVersion != "kubeflow.org/v1" {
		u = builders.MakeKubeDLJob(ns, name).WithExitCodeWorkers(1).Unstructured()
	}
	require.Equal(t, apiVersion, u.GetAPIVersion())
	require.NoError(t, env.c.Create(context.Background(), u))
	return u
}

// workerSpecPod is the pod kubeflow's operator would create for the job's
// worker, not yet created: the injected template (managed label included),
// the operator's labels, the job as controller.
func workerSpecPod(t *testing.T, job *unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	raw, found, err := unstructured.NestedMap(job.Object, "spec", "pytorchReplicaSpecs", "Worker", "template")
	require.NoError(t, err)
	require.True(t, found)
	var tmpl corev1.PodTemplateSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl))
	require.Equal(t, "true", tmpl.Labels[contract.LabelManaged], "the job's template was injected")
	pod := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	pod.Namespace, pod.Name = job.GetNamespace(), job.GetName()+"-worker-0"
	pod.Labels["training.kubeflow.org/job-name"] = job.GetName()
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: job.GetAPIVersion(), Kind: job.GetKind(), Name: job.GetName(), UID: job.GetUID(), Controller: ptr.To(true),
	}}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return pod
}

func workerOf(t *testing.T, job *unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	pod := workerSpecPod(t, job)
	require.NoError(t, env.c.Create(context.Background(), pod))
	require.Equal(t, "true", pod.Labels[contract.LabelManaged])
	return pod
}

func barePod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	return barePodWith(t, ns, name, corev1.RestartPolicyNever)
}

func barePodWith(t *testing.T, ns, name string, restart corev1.RestartPolicy) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{RestartPolicy: restart, Containers: []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}}},
	}
	require.NoError(t, env.c.Create(context.Background(), pod))
	require.Equal(t, "true", pod.Labels[contract.LabelManaged])
	return pod
}

// terminate writes what the kubelet writes when the training container
// stops after its preStop hook: exit 143 (SIGTERM), the termination message.
func terminate(t *testing.T, pod *corev1.Pod, message string, failed bool) {
	t.Helper()
	terminateContainer(t, pod, "pytorch", message, failed)
}

func terminateContainer(t *testing.T, pod *corev1.Pod, container, message string, failed bool) {
	t.Helper()
	code := int32(143)
	if failed {
		code = 1
	}
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodFailed
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: container, Image: "example.com/train:1", Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: "Error", Message: message, StartedAt: metav1.Now(), FinishedAt: metav1.Now(),
			}},
		}}
	})
}

func setPodStatus(t *testing.T, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Pod{}
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		mutate(&cur.Status)
		return env.c.Status().Update(ctx, cur)
	}))
}

func eventsOf(t *testing.T, ns string, uid types.UID) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	require.NoError(t, env.c.List(context.Background(), &list, client.InNamespace(ns)))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.UID == uid && e.ReportingController == outcome.ControllerName {
			out = append(out, e)
		}
	}
	return out
}

func waitEvent(t *testing.T, ns string, uid types.UID, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	require.Eventually(t, func() bool {
		for _, e := range eventsOf(t, ns, uid) {
			if e.Reason == reason {
				found = e
				return true
			}
		}
		return false
	}, waitFor, tick, "Event %s on %s in %s", reason, uid, ns)
	return found
}

// ---- metrics, read in-process from controller-runtime's registry (what /metrics serves).

func family(t *testing.T, name string) []*dto.Metric {
	t.Helper()
	fams, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil // a labelled histogram has no series before its first observation
}

// matching lists the metric's series whose labels include want.
func matching(t *testing.T, name string, want map[string]string) []*dto.Metric {
	t.Helper()
	var out []*dto.Metric
	for _, m := range family(t, name) {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && got[k] == v
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

func outcomeLabel(o string) map[string]string {
	if o == "" {
		return nil
	}
	return map[string]string{"outcome": o}
}

// counter, histCount and histSum sum the series of one outcome ("": all),
// over every cause and namespace.
func counter(t *testing.T, name, o string) float64 { return counterOf(t, name, outcomeLabel(o)) }

func counterOf(t *testing.T, name string, want map[string]string) float64 {
	var sum float64
	for _, m := range matching(t, name, want) {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

func histCount(t *testing.T, name, o string) uint64 {
	var n uint64
	for _, m := range matching(t, name, outcomeLabel(o)) {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

func histSum(t *testing.T, name, o string) float64 {
	var sum float64
	for _, m := range matching(t, name, outcomeLabel(o)) {
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}
