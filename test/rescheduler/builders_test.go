package rescheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainguard/trainguard/internal/testing/builders"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/test/controlplane"
)

const (
	// waitFor bounds every Eventually: a decision takes milliseconds, a
	// node-lost one the grace on top.
	waitFor = 15 * time.Second
	tick    = 20 * time.Millisecond

	hostnameLabel = "kubernetes.io/hostname"
)

var nsCounter atomic.Int64 // unique namespace names across tests.

// namespace creates an opted-in namespace and waits until the pod webhook
// sees it (its namespace cache may lag a few milliseconds behind).
func namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("rs-%d", nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Annotations: map[string]string{contract.AnnotationInject: contract.InjectEnabled},
	}}
	require.NoError(t, env.c.Create(ctx, ns))
	require.Eventually(t, func() bool {
		probe := barePod(name, "probe").obj()
		if err := env.c.Create(ctx, probe, client.DryRunAll); err != nil {
			return false
		}
		return probe.Labels[contract.LabelManaged] == "true"
	}, waitFor, tick, "the pod webhook must inject pods in namespace %s", name)
	return name
}

// ensureNamespace creates a namespace if it does not exist (trainguard's own).
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := env.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// ---- Nodes: the kubelet's side is simulated through the status subresource.

// readyNode creates a Ready node named after the namespace, in a zone of
// the namespace's own: the zone brake judges each test's nodes apart from
// those other tests left NotReady.
func readyNode(t *testing.T, ns, suffix string) string {
	t.Helper()
	ctx := context.Background()
	name := ns + "-" + suffix
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{hostnameLabel: name, corev1.LabelTopologyZone: ns}}}
	require.NoError(t, env.c.Create(ctx, node))
	setNodeReady(t, name, corev1.ConditionTrue, time.Now().Add(-time.Hour))
	return name
}

// setNodeReady writes the node's Ready condition as the kubelet (or the
// node lifecycle controller) would; since is its lastTransitionTime, which
// the API stores with second precision.
func setNodeReady(t *testing.T, name string, status corev1.ConditionStatus, since time.Time) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := env.c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		cond := corev1.NodeCondition{
			Type: corev1.NodeReady, Status: status, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(since),
		}
		if status != corev1.ConditionTrue {
			cond.Reason = "NodeStatusUnknown"
		}
		node.Status.Conditions = []corev1.NodeCondition{cond}
		return env.c.Status().Update(ctx, node)
	}))
}

// ---- Jobs and pods.

// pytorchJob creates a kubeflow.org/v1 PyTorchJob through the webhooks and
// returns it as admitted (its template injected).
func pytorchJob(t *testing.T, ns, name string, annotations map[string]string) *unstructured.Unstructured {
	t.Helper()
	u := builders.MakeKubeflowJob(ns, name).WithExitCodeWorkers(1).Unstructured()
	if annotations != nil {
		u.SetAnnotations(annotations)
	}
	require.NoError(t, env.c.Create(context.Background(), u))
	return u
}

// podBuilder builds the pods the tests create, as an operator (or a user)
// would; the webhook then admits them.
type podBuilder struct{ pod *corev1.Pod }

// barePod is a pod without a controller, with a container named pytorch so
// the webhook treats it as a training pod.
func barePod(ns, name string) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}},
		},
	}}
}

// workerOf is the pod kubeflow's operator creates for the job's first
// worker: the injected template (marker annotation included), the
// operator's labels, the job as controller, restartPolicy Never (ExitCode).
func workerOf(t *testing.T, job *unstructured.Unstructured) *podBuilder {
	t.Helper()
	raw, found, err := unstructured.NestedMap(job.Object, "spec", "pytorchReplicaSpecs", "Worker", "template")
	require.NoError(t, err)
	require.True(t, found)
	var tmpl corev1.PodTemplateSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl))
	require.Contains(t, tmpl.Annotations, contract.AnnotationInjected, "the job's template was injected")
	pod := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	pod.Namespace, pod.Name = job.GetNamespace(), job.GetName()+"-worker-0"
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels["training.kubeflow.org/job-name"] = job.GetName()
	pod.Labels["training.kubeflow.org/replica-type"] = "worker"
	pod.Labels["training.kubeflow.org/replica-index"] = "0"
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: job.GetAPIVersion(), Kind: job.GetKind(), Name: job.GetName(), UID: job.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &podBuilder{pod: pod}
}

func (b *podBuilder) onNode(node string) *podBuilder { b.pod.Spec.NodeName = node; return b }

func (b *podBuilder) label(k, v string) *podBuilder {
	if b.pod.Labels == nil {
		b.pod.Labels = map[string]string{}
	}
	b.pod.Labels[k] = v
	return b
}

func (b *podBuilder) annotate(k, v string) *podBuilder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[k] = v
	return b
}

func (b *podBuilder) restartPolicy(p corev1.RestartPolicy) *podBuilder {
	b.pod.Spec.RestartPolicy = p
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.pod.DeepCopy() }

// create creates the pod through the webhooks and returns it as admitted.
func (b *podBuilder) create(t *testing.T) *corev1.Pod {
	t.Helper()
	p := b.obj()
	require.NoError(t, env.c.Create(context.Background(), p))
	require.Equal(t, "true", p.Labels[contract.LabelManaged], "the webhook marks the pod managed, so the rescheduler watches it")
	return p
}

// ---- The kubelet's pod status.

// running reports the pod's training container running.
func running(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "pytorch", Image: "example.com/train:1", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}}
	})
}

// exited reports the training container terminated with code, and the pod
// Failed (restartPolicy Never) or the container crash-looping (OnFailure).
func exited(t *testing.T, pod *corev1.Pod, code int32) {
	t.Helper()
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		term := &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", StartedAt: metav1.Now(), FinishedAt: metav1.Now()}
		cs := corev1.ContainerStatus{Name: "pytorch", Image: "example.com/train:1", Started: ptr.To(false)}
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			s.Phase = corev1.PodFailed
			cs.State.Terminated = term
		} else {
			s.Phase = corev1.PodRunning
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
			cs.LastTerminationState.Terminated = term
			cs.RestartCount = 1
		}
		s.ContainerStatuses = []corev1.ContainerStatus{cs}
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
		require.Equal(t, pod.UID, cur.UID, "status of the pod under test")
		mutate(&cur.Status)
		return env.c.Status().Update(ctx, cur)
	}))
}

// confirmDeletion is the kubelet confirming a graceful delete (or the
// operator's force delete): the pod object goes.
func confirmDeletion(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	err := env.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
}

// ---- Assertions.

// getPod reads the pod; nil when it is gone or replaced by another pod of the same name.
func getPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	cur := &corev1.Pod{}
	err := env.c.Get(context.Background(), client.ObjectKeyFromObject(pod), cur)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(t, err)
	if cur.UID != pod.UID {
		return nil
	}
	return cur
}

// waitTerminating waits until the pod is being deleted and returns it.
func waitTerminating(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var cur *corev1.Pod
	require.Eventually(t, func() bool {
		cur = getPod(t, pod)
		return cur != nil && cur.DeletionTimestamp != nil
	}, waitFor, tick, "pod %s must be deleted gracefully", pod.Name)
	return cur
}

// waitDeleted waits until the pod is deleted: terminating, or gone (the
// API server deletes a Failed pod at once, whatever the grace period: its
// containers have nothing left to run).
func waitDeleted(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	require.Eventually(t, func() bool {
		cur := getPod(t, pod)
		return cur == nil || cur.DeletionTimestamp != nil
	}, waitFor, tick, "pod %s must be deleted", pod.Name)
}

// waitGone waits until the pod object is gone.
func waitGone(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	require.Eventually(t, func() bool { return getPod(t, pod) == nil }, waitFor, tick, "pod %s must be gone", pod.Name)
}

// assertUntouched checks the pod is neither deleted nor recorded as migrated.
func assertUntouched(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	cur := getPod(t, pod)
	require.NotNil(t, cur, "pod %s still exists", pod.Name)
	assert.Nil(t, cur.DeletionTimestamp, "pod %s is not deleted", pod.Name)
	if rec := record(t, pod); rec != nil {
		// The record may hold the job's in-place restart count, never a node.
		assert.Empty(t, rec.nodes, "no node is recorded as bad for the pod's job")
	}
}

// podEvents lists the Events about the pod (this incarnation of it).
func podEvents(t *testing.T, pod *corev1.Pod) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	require.NoError(t, env.c.List(context.Background(), &list, client.InNamespace(pod.Namespace)))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == pod.Name && e.Regarding.UID == pod.UID {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EventTime.Before(&out[j].EventTime) })
	return out
}

func reasons(events []eventsv1.Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.Reason)
	}
	return out
}

// waitEvent waits for an Event with the reason about the pod and returns it.
func waitEvent(t *testing.T, pod *corev1.Pod, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	require.Eventually(t, func() bool {
		for _, e := range podEvents(t, pod) {
			if e.Reason == reason {
				found = e
				return true
			}
		}
		return false
	}, waitFor, tick, "an Event %s about pod %s", reason, pod.Name)
	assert.Equal(t, resched.ControllerName, found.ReportingController)
	return found
}

// waitEventOnAny waits for an Event about one of pods: a brake's
// PartitionSuspected Event is on whichever pod it held when it was
// written, one Event for all the pods it holds.
func waitEventOnAny(t *testing.T, pods []*corev1.Pod, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	require.Eventually(t, func() bool {
		for _, pod := range pods {
			for _, e := range podEvents(t, pod) {
				if e.Reason == reason {
					found = e
					return true
				}
			}
		}
		return false
	}, waitFor, tick, "an Event %s about one of %d pods", reason, len(pods))
	assert.Equal(t, resched.ControllerName, found.ReportingController)
	return found
}

// waitEventSince waits for an Event of reason by the rescheduler, in any
// namespace, written after since: the cluster brake's one Event is on
// whichever pod it held first, and the shared API server has other
// tests' pods too.
func waitEventSince(t *testing.T, reason string, since time.Time) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	require.Eventually(t, func() bool {
		var list eventsv1.EventList
		require.NoError(t, env.c.List(context.Background(), &list))
		for _, e := range list.Items {
			if e.Reason == reason && e.ReportingController == resched.ControllerName && !eventTimeOf(&e).Before(since) {
				found = e
				return true
			}
		}
		return false
	}, waitFor, tick, "an Event %s since %s", reason, since)
	return found
}

// eventTimeOf is when e was written.
func eventTimeOf(e *eventsv1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// badNodeRecord is a job's record as the rescheduler wrote it.
type badNodeRecord struct {
	cm          *corev1.ConfigMap
	nodes       map[string]time.Time
	reschedules string
}

// record reads the bad-node record of the pod's job, in trainguard's
// namespace; nil when there is none.
func record(t *testing.T, pod *corev1.Pod) *badNodeRecord {
	t.Helper()
	key := jobs.Builtin().KeyOf(pod)
	cm := &corev1.ConfigMap{}
	err := env.c.Get(context.Background(), client.ObjectKey{Namespace: controlplane.Namespace, Name: resched.RecordName(key)}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(t, err)
	assert.Equal(t, "true", cm.Labels[contract.LabelBadNodes], "the record is labelled, so the caches see it")
	rec := &badNodeRecord{cm: cm, nodes: map[string]time.Time{}, reschedules: cm.Data["reschedules"]}
	raw := map[string]string{}
	require.NoError(t, json.Unmarshal([]byte(cm.Data["nodes"]), &raw))
	for n, exp := range raw {
		ts, err := time.Parse(time.RFC3339, exp)
		require.NoError(t, err)
		rec.nodes[n] = ts
	}
	return rec
}

// avoidedNodes is every node the pod avoids, required or preferred, sorted.
func avoidedNodes(t *testing.T, pod *corev1.Pod) []string {
	t.Helper()
	nodes := append(requiredAvoided(t, pod), preferredAvoided(t, pod)...)
	slices.Sort(nodes)
	return nodes
}

// preferredAvoided is the hostname NotIn list of the pod's preferred node
// affinity (trainguard writes one term of it).
func preferredAvoided(t *testing.T, pod *corev1.Pod) []string {
	t.Helper()
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return nil
	}
	var nodes []string
	terms := 0
	for _, term := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		for _, e := range term.Preference.MatchExpressions {
			if e.Key == hostnameLabel && e.Operator == corev1.NodeSelectorOpNotIn {
				nodes = append(nodes, e.Values...)
				terms++
				assert.Equal(t, int32(100), term.Weight, "the strongest preference")
			}
		}
	}
	assert.LessOrEqual(t, terms, 1, "one preferred hostname NotIn term, not one per writer")
	return nodes
}

// requiredAvoided is the hostname NotIn list of the pod's required node
// affinity; it must be the same in every node selector term.
func requiredAvoided(t *testing.T, pod *corev1.Pod) []string {
	t.Helper()
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var first []string
	for i, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		var notIn []string
		n := 0
		for _, e := range term.MatchExpressions {
			if e.Key == hostnameLabel && e.Operator == corev1.NodeSelectorOpNotIn {
				notIn = append(notIn, e.Values...)
				n++
			}
		}
		assert.LessOrEqual(t, n, 1, "one hostname NotIn expression per term, not one per writer")
		if i == 0 {
			first = notIn
		} else {
			assert.Equal(t, first, notIn, "every node selector term avoids the same nodes")
		}
	}
	return first
}
