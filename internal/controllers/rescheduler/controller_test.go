package rescheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

var pytorchJobGVK = schema.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}

// harness is a Reconciler over controller-runtime's fake client, with a fake
// clock, a fake recorder and every delete's options captured.
type harness struct {
	r         *Reconciler
	c         client.Client
	events    *events.FakeRecorder
	clock     *testingclock.FakeClock
	deletes   []client.DeleteOptions
	evictions []metav1.DeleteOptions
	// jobReads counts reads of jobs (unstructured or metadata-only: the
	// API reads the rescheduler makes for a job's policy).
	jobReads int
	// onJobRead, when set, runs at each of them (a slow read).
	onJobRead func()
	// kinds are the job kinds the reconciler serves; none means jobs.Builtin().
	kinds jobs.Kinds
}

// ownNS is trainguard's namespace in the unit tests.
const ownNS = "trainguard-system"

// testConfig is the default Configuration with testOptions.
func testConfig() *configv1alpha1.Configuration {
	c := configv1alpha1.Default()
	c.Rescheduler = testOptions()
	return c
}

func testOptions() Options {
	o := DefaultOptions()
	o.ForceDeleteAfter.Duration = 5 * time.Minute // the tests' bound, independent of the default
	return o
}

// optedIn is the tenant namespace the pods live in.
func optedIn() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Annotations: map[string]string{contract.AnnotationInject: contract.InjectEnabled}}}
}

func newHarness(t *testing.T, withJobCRD bool, objs ...client.Object) *harness {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(scheme))
	require.NoError(t, coordinationv1.AddToScheme(scheme))
	if withJobCRD {
		scheme.AddKnownTypeWithName(pytorchJobGVK, &unstructured.Unstructured{})
		scheme.AddKnownTypeWithName(pytorchJobGVK.GroupVersion().WithKind("PyTorchJobList"), &unstructured.UnstructuredList{})
	}
	h := &harness{events: events.NewFakeRecorder(100), clock: testingclock.NewFakeClock(t0)}
	objs = append(objs, optedIn())
	h.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, IndexPodNodeName, podNodeName).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				switch obj.(type) {
				case *unstructured.Unstructured, *metav1.PartialObjectMetadata:
					h.jobReads++
					if h.onJobRead != nil {
						h.onJobRead()
					}
				}
				return c.Get(ctx, key, obj, opts...)
			},
			// The API server assigns UIDs; the fake client does not.
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if obj.GetUID() == "" {
					obj.SetUID(types.UID("created-" + obj.GetName()))
				}
				return c.Create(ctx, obj, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				o := client.DeleteOptions{}
				o.ApplyOptions(opts)
				h.deletes = append(h.deletes, o)
				return c.Delete(ctx, obj, opts...)
			},
			SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
				if ev, ok := subObj.(*policyv1.Eviction); ok && sub == "eviction" {
					require.NotNil(t, ev.DeleteOptions, "an eviction carries the UID precondition")
					h.evictions = append(h.evictions, *ev.DeleteOptions)
				}
				return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
			},
		}).Build()
	h.r = h.newReconciler()
	return h
}

func (h *harness) reconcile(t *testing.T, ns, name string) reconcile.Result {
	t.Helper()
	res, err := h.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	require.NoError(t, err)
	return res
}

func (h *harness) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (h *harness) record(t *testing.T, key jobs.Key) (*corev1.ConfigMap, Record) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKey{Namespace: ownNS, Name: RecordName(key)}, cm))
	rec, err := decodeRecord(cm, key)
	require.NoError(t, err)
	return cm, rec
}

func (h *harness) podExists(t *testing.T, ns, name string) bool {
	t.Helper()
	err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.Pod{})
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

func lostNode() *corev1.Node { return newNode("n1", corev1.ConditionFalse, 2*time.Minute) }

func pytorchJob() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(pytorchJobGVK)
	u.SetNamespace("team")
	u.SetName("job")
	u.SetUID("job-uid")
	return u
}

// recordCM builds a record ConfigMap as the controller writes it.
func recordCM(t *testing.T, key jobs.Key, rec Record) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ownNS, Name: RecordName(key),
		Labels: map[string]string{contract.LabelBadNodes: "true"}}}
	require.NoError(t, rec.encodeInto(cm, key))
	return cm
}

func TestNodeLostGracefulDeleteRecordsBadNode(t *testing.T) {
	pod := newPod()
	h := newHarness(t, false, pod, lostNode())

	h.reconcile(t, "team", pod.Name)

	assert.False(t, h.podExists(t, "team", pod.Name), "pod evicted")
	assert.Empty(t, h.deletes, "evicted, never deleted: PodDisruptionBudgets hold")
	require.Len(t, h.evictions, 1)
	assert.Nil(t, h.evictions[0].GracePeriodSeconds, "graceful: the pod's own grace period, so preStop runs")
	require.NotNil(t, h.evictions[0].Preconditions)
	assert.Equal(t, types.UID("uid-1"), *h.evictions[0].Preconditions.UID)

	key := keyOf(pod)
	cm, rec := h.record(t, key)
	assert.Equal(t, "true", cm.Labels[contract.LabelBadNodes])
	assert.Equal(t, map[string]time.Time{"n1": t0.Add(time.Hour)}, rec.Nodes)
	assert.Equal(t, 1, rec.Reschedules)
	assert.Equal(t, t0, rec.RoundStart)
	assert.Equal(t, ownNS, cm.Namespace, "records live in trainguard's namespace")
	assert.Empty(t, cm.OwnerReferences, "no cross-namespace owner: the sweeper removes it")
	assert.Equal(t, types.UID("job-uid"), rec.JobUID)

	evs := h.drainEvents()
	require.Len(t, evs, 2, "%v", evs)
	assert.Regexp(t, `^Warning NodeLost node n1 Ready=False for 2m0s`, evs[0])
	assert.Regexp(t, `^Normal GracefulDelete .*reschedule 1/10`, evs[1])
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.decisions.WithLabelValues(ReasonGracefulDelete)))
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.deletions.WithLabelValues("evict")))
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.badNodes))

	// The replacement the operator creates is kept off n1.
	store := newBadNodeStore(h.c, testOptions(), jobs.Builtin(), ownNS, h.clock)
	replacement := newPod(func(p *corev1.Pod) { p.UID = ""; p.Spec.NodeName = "" })
	avoid, err := store.AvoidNodes(context.Background(), replacement)
	require.NoError(t, err)
	assert.Equal(t, podspec.Avoid{Preferred: []string{"n1"}}, avoid, "failed the job once: preferred, never required")
}

func TestNodeNotReadyWithinGraceWaits(t *testing.T) {
	pod := newPod()
	h := newHarness(t, false, pod, newNode("n1", corev1.ConditionUnknown, 20*time.Second))

	res := h.reconcile(t, "team", pod.Name)

	assert.Equal(t, 40*time.Second, res.RequeueAfter)
	assert.True(t, h.podExists(t, "team", pod.Name))
	assert.Empty(t, h.deletes)
	assert.Empty(t, h.evictions)
	assert.Empty(t, h.drainEvents())
}

// fault-scheduling=force on a node lost for less than --force-delete-after:
// evicted with grace period 0, so a PodDisruptionBudget still holds.
func TestForceModeEvictsNowBeforeTheBound(t *testing.T) {
	pod := newPod(label(contract.LabelMindClusterFaultScheduling, "force"))
	h := newHarness(t, false, pod, lostNode())

	h.reconcile(t, "team", pod.Name)

	assert.Empty(t, h.deletes)
	require.Len(t, h.evictions, 1)
	require.NotNil(t, h.evictions[0].GracePeriodSeconds)
	assert.EqualValues(t, 0, *h.evictions[0].GracePeriodSeconds)
	_, rec := h.record(t, keyOf(pod))
	assert.Contains(t, rec.Nodes, "n1")
	assert.Contains(t, h.drainEvents(), "Normal ForceDelete node n1 Ready=False for 2m0s (grace 1m0s); reschedule 1/10; fault-scheduling=force: evicting with grace period 0 (PodDisruptionBudgets hold)")
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.deletions.WithLabelValues("evict-now")))
}

// Past --force-delete-after (or with the Node object gone), force mode
// deletes with grace period 0, and the Event says why.
func TestForceDeletePastTheBound(t *testing.T) {
	pod := newPod(label(contract.LabelMindClusterFaultScheduling, "force"))
	h := newHarness(t, false, pod, newNode("n1", corev1.ConditionUnknown, 6*time.Minute))

	h.reconcile(t, "team", pod.Name)

	assert.Empty(t, h.evictions)
	require.Len(t, h.deletes, 1)
	require.NotNil(t, h.deletes[0].GracePeriodSeconds)
	assert.EqualValues(t, 0, *h.deletes[0].GracePeriodSeconds)
	assert.Contains(t, h.drainEvents(), "Normal ForceDelete node n1 Ready=Unknown for 6m0s (grace 1m0s); reschedule 1/10; fault-scheduling=force: node n1 unreachable (Ready=Unknown) for 6m0s, past --force-delete-after=5m0s, force-deleting (grace period 0, PodDisruptionBudget bypassed)")
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.deletions.WithLabelValues("force")))
}

func TestGracefulDeleteHangingOnLostNodeIsForced(t *testing.T) {
	pod := newPod(func(p *corev1.Pod) { p.Finalizers = []string{"test/hold"} }, terminating(100*time.Second))
	h := newHarness(t, false, pod) // node deleted

	res := h.reconcile(t, "team", pod.Name)
	assert.Equal(t, 800*time.Second, res.RequeueAfter)
	assert.Empty(t, h.deletes)

	h.clock.Step(800 * time.Second)
	h.reconcile(t, "team", pod.Name)
	require.Len(t, h.deletes, 1)
	assert.EqualValues(t, 0, *h.deletes[0].GracePeriodSeconds)
	assert.Contains(t, h.drainEvents()[1], "Normal ForceDelete")
}

func TestRetryableExitWithCap(t *testing.T) {
	pod := newPod(exited(137, "Error"), annotation(contract.AnnotationMaxReschedules, "2"))
	h := newHarness(t, false, pod, readyNode())

	h.reconcile(t, "team", pod.Name)

	assert.False(t, h.podExists(t, "team", pod.Name))
	evs := h.drainEvents()
	require.Len(t, evs, 2)
	assert.Equal(t, "Warning RetryableExit exit code 137: SIGKILL is retryable; reschedule 1/2; fault-scheduling=grace: evicting gracefully so the preStop checkpoint runs (PodDisruptionBudgets hold)", evs[0])
}

func TestCapReachedAnnotatesJobOnce(t *testing.T) {
	pod := newPod()
	key := keyOf(pod)
	rec := recordCM(t, key, Record{Nodes: map[string]time.Time{"n0": t0.Add(time.Minute)}, Reschedules: 10, RoundStart: t0.Add(-time.Hour)})
	h := newHarness(t, true, pod, lostNode(), rec, pytorchJob())

	h.reconcile(t, "team", pod.Name)

	assert.True(t, h.podExists(t, "team", pod.Name), "no further action")
	assert.Zero(t, h.removals())
	job := pytorchJob()
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKeyFromObject(job), job))
	assert.Equal(t, "10", job.GetAnnotations()[contract.AnnotationReschedulesExhausted])
	got := &corev1.Pod{}
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
	assert.Equal(t, ReasonRescheduleCapReached, got.Annotations[contract.AnnotationDecision])
	evs := h.drainEvents()
	require.Len(t, evs, 2)
	assert.Regexp(t, `^Warning RescheduleCapReached .*reschedule cap reached \(10/10\): no further action`, evs[1])
	_, after := h.record(t, key)
	assert.NotContains(t, after.Nodes, "n1", "nothing recorded past the cap")

	// Reconciling again (resync, restart, leader change) repeats nothing.
	h.reconcile(t, "team", pod.Name)
	assert.Empty(t, h.drainEvents())
	assert.Zero(t, h.removals())
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.decisions.WithLabelValues(ReasonRescheduleCapReached)))
}

func TestCapReachedWithoutJobCRD(t *testing.T) {
	pod := newPod()
	key := keyOf(pod)
	rec := recordCM(t, key, Record{Reschedules: 10, RoundStart: t0.Add(-time.Hour)})
	h := newHarness(t, false, pod, lostNode(), rec)

	h.reconcile(t, "team", pod.Name)

	assert.Zero(t, h.removals())
	assert.Len(t, h.drainEvents(), 2, "the pod's Events still say it")
}

func TestJobAnnotationSetsCap(t *testing.T) {
	pod := newPod()
	key := keyOf(pod)
	job := pytorchJob()
	job.SetAnnotations(map[string]string{contract.AnnotationMaxReschedules: "3"})
	rec := recordCM(t, key, Record{Reschedules: 3, RoundStart: t0.Add(-time.Hour)})
	h := newHarness(t, true, pod, lostNode(), rec, job)

	h.reconcile(t, "team", pod.Name)

	assert.Zero(t, h.removals(), "the job's cap of 3 applies, not the config's 10")
	assert.Contains(t, h.drainEvents()[1], "(3/3)")
}

func TestPermanentFailureUntouchedEventOnce(t *testing.T) {
	pod := newPod(exited(1, "Error"))
	h := newHarness(t, false, pod, readyNode())

	h.reconcile(t, "team", pod.Name)
	h.reconcile(t, "team", pod.Name)

	assert.True(t, h.podExists(t, "team", pod.Name))
	assert.Zero(t, h.removals())
	assert.Equal(t, []string{"Warning PermanentFailure exit code 1: general error: permanent failure, not retried"}, h.drainEvents())
	err := h.c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: RecordName(keyOf(pod))}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "no record for a permanent failure")
}

func TestRecoverInPlaceAndOffLeavePodAlone(t *testing.T) {
	for _, opt := range []podOpt{
		annotation(contract.AnnotationMindClusterRecoverStrategy, "recover-in-place"),
		label(contract.LabelMindClusterFaultScheduling, "off"),
	} {
		pod := newPod(opt)
		h := newHarness(t, false, pod, lostNode())
		h.reconcile(t, "team", pod.Name)
		assert.True(t, h.podExists(t, "team", pod.Name))
		assert.Zero(t, h.removals())
		evs := h.drainEvents()
		require.Len(t, evs, 2)
		assert.Regexp(t, `^Normal (RestartInPlace|FaultSchedulingOff) `, evs[1])
	}
}

func TestBackoffPendingRequeues(t *testing.T) {
	pod := newPod()
	key := keyOf(pod)
	rec := recordCM(t, key, Record{Nodes: map[string]time.Time{"n0": t0.Add(time.Hour)}, Reschedules: 3, RoundStart: t0.Add(-15 * time.Second)})
	h := newHarness(t, false, pod, lostNode(), rec)

	res := h.reconcile(t, "team", pod.Name)

	assert.Equal(t, 25*time.Second, res.RequeueAfter)
	assert.Zero(t, h.removals())
	assert.Regexp(t, `^Normal BackoffPending `, h.drainEvents()[1])

	h.clock.Step(25 * time.Second)
	h.reconcile(t, "team", pod.Name)
	require.Len(t, h.evictions, 1)
	_, after := h.record(t, key)
	assert.Equal(t, 4, after.Reschedules)
	assert.ElementsMatch(t, []string{"n0", "n1"}, keys(after.Nodes))
}

func TestPodsOfOneIncidentCountOnce(t *testing.T) {
	a, b := newPod(), newPod(func(p *corev1.Pod) { p.Name = "job-worker-1"; p.UID = "uid-2" })
	h := newHarness(t, false, a, b, lostNode())

	h.reconcile(t, "team", a.Name)
	h.clock.Step(time.Minute) // even after the round's window: same node, same incident
	h.reconcile(t, "team", b.Name)

	assert.Len(t, h.evictions, 2)
	_, rec := h.record(t, keyOf(a))
	assert.Equal(t, 1, rec.Reschedules)
}

func TestBarePodRecreated(t *testing.T) {
	pod := newPod(bare, func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x1", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}, {Name: "data"}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access-x1", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}, {Name: "data", MountPath: "/data"}}
		p.Spec.Priority = new(int32)
	})
	key := keyOf(pod)
	require.True(t, key.Bare())
	h := newHarness(t, false, pod, lostNode())

	h.reconcile(t, "team", pod.Name)
	assert.False(t, h.podExists(t, "team", pod.Name))
	cm, rec := h.record(t, key)
	require.NotNil(t, rec.Stash, "the observed pod is stashed before the eviction")
	assert.Equal(t, Stash{Namespace: "team", Name: pod.Name, UID: pod.UID, Labels: pod.Labels, Annotations: pod.Annotations, Spec: pod.Spec}, *rec.Stash)
	assert.Equal(t, []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team", Name: pod.Name}}}, h.r.stashedPodOf(context.Background(), cm))

	// The delete event reconciles the now-missing pod: it is recreated.
	h.reconcile(t, "team", pod.Name)
	got := &corev1.Pod{}
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
	assert.Empty(t, got.Spec.NodeName)
	assert.Equal(t, corev1.PodStatus{}, got.Status)
	assert.Equal(t, "true", got.Labels[contract.LabelManaged])
	assert.Nil(t, got.Spec.Priority)
	assert.Equal(t, []corev1.Volume{{Name: "data"}}, got.Spec.Volumes)
	assert.Equal(t, []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}, got.Spec.Containers[0].VolumeMounts)
	require.NotNil(t, got.Spec.Affinity)
	assert.Nil(t, got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "n1 failed the pod once: not forbidden")
	assert.Equal(t, []corev1.PreferredSchedulingTerm{{Weight: podspec.AvoidWeight, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: hostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1"}},
	}}}}, got.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)

	_, rec = h.record(t, key)
	assert.Nil(t, rec.Stash)
	evs := h.drainEvents()
	assert.Equal(t, "Normal BarePodRecreated bare pod recreated without its node; prefers other nodes than [n1] (failed the job once)", evs[len(evs)-1])
	assert.Equal(t, 1.0, testutil.ToFloat64(h.r.metrics.recreated))

	// Nothing more to do.
	h.reconcile(t, "team", pod.Name)
	assert.Empty(t, h.drainEvents())
}

// Issue 31, item 4: the chart's admission policy refuses trainguard's
// account a pod without its marker or one Pod Security's baseline refuses
// (host namespaces, a privileged container, a hostPath volume, added
// capabilities, host ports, unconfined profiles, ...), whatever the
// namespace enforces. A bare pod it could not recreate is not evicted (it
// would be lost): it stays, with one Warning saying why.
func TestBarePodTrainguardMayNotRecreateIsLeftAlone(t *testing.T) {
	sc := func(c *corev1.SecurityContext) podOpt {
		return func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = c }
	}
	unmasked := corev1.UnmaskedProcMount
	for what, opt := range map[string]podOpt{
		"SYS_ADMIN": sc(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}),
		"IPC_LOCK in an init container (RDMA)": func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "setup", SecurityContext: &corev1.SecurityContext{
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK"}}}}}
		},
		"a host port": func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 29500, HostPort: 29500}}
		},
		"seccomp Unconfined": func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		},
		"AppArmor unconfined by annotation": annotation("container.apparmor.security.beta.kubernetes.io/pytorch", "unconfined"),
		"/proc unmasked":                    sc(&corev1.SecurityContext{ProcMount: &unmasked}),
		"SELinux spc_t":                     sc(&corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}}),
		"an unsafe sysctl": func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}}
		},
		"a probe host": func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
		},
		"hostNetwork": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"hostPID":     func(p *corev1.Pod) { p.Spec.HostPID = true },
		"a privileged container": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
		},
		"a hostPath volume": func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "dev", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev"}}}}
		},
		"no marker annotation": func(p *corev1.Pod) { p.Annotations = nil },
	} {
		t.Run(what, func(t *testing.T) {
			pod := newPod(bare, opt)
			h := newHarness(t, false, pod, lostNode())

			h.reconcile(t, "team", pod.Name)
			assert.True(t, h.podExists(t, "team", pod.Name), "not evicted: it could never be recreated")
			assert.Empty(t, h.evictions)
			got := &corev1.Pod{}
			require.NoError(t, h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
			assert.Equal(t, ReasonNotRecreatable, got.Annotations[contract.AnnotationDecision])
			evs := h.drainEvents()
			require.NotEmpty(t, evs)
			assert.Contains(t, evs[len(evs)-1], "Warning BarePodNotRecreatable")
			assert.Contains(t, evs[len(evs)-1], "trainguard may not recreate this bare pod")

			// Reported once.
			h.reconcile(t, "team", pod.Name)
			assert.Empty(t, h.drainEvents())
		})
	}
}

// What Pod Security's baseline admits, the fence admits: such a bare pod
// (on its node, which the replacement drops) is moved and recreated.
func TestBarePodWithinBaselineIsRecreated(t *testing.T) {
	pod := newPod(bare, func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			SELinuxOptions: &corev1.SELinuxOptions{Type: "container_t"},
			Sysctls:        []corev1.Sysctl{{Name: "net.ipv4.tcp_keepalive_time", Value: "60"}},
		}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			Capabilities:    &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
			AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
		}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 29500}}
		p.Annotations["container.apparmor.security.beta.kubernetes.io/pytorch"] = "runtime/default"
	})
	require.Equal(t, "n1", pod.Spec.NodeName)
	assert.Empty(t, unrecreatable(stashOf(pod)))
	h := newHarness(t, false, pod, lostNode())

	h.reconcile(t, "team", pod.Name)
	assert.False(t, h.podExists(t, "team", pod.Name), "evicted: it can be recreated")
	h.reconcile(t, "team", pod.Name)
	got := &corev1.Pod{}
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
	assert.Empty(t, got.Spec.NodeName)
	evs := h.drainEvents()
	assert.Equal(t, "Normal BarePodRecreated bare pod recreated without its node; prefers other nodes than [n1] (failed the job once)", evs[len(evs)-1])
}

func TestBarePodRecreationWaitsForTheOldPod(t *testing.T) {
	pod := newPod(bare)
	key := keyOf(pod)
	old := newPod(bare, func(p *corev1.Pod) { p.Finalizers = []string{"test/hold"} }, terminating(time.Second))
	h := newHarness(t, false, old, recordCM(t, key, Record{Nodes: map[string]time.Time{"n1": t0.Add(time.Hour)}, Stash: stashOf(old)}))

	// The cache says the pod is gone, the API server that it is still terminating.
	res, err := h.r.recreatePending(context.Background(), types.NamespacedName{Namespace: "team", Name: pod.Name})
	require.NoError(t, err)
	assert.Equal(t, time.Second, res.RequeueAfter)
	_, rec := h.record(t, key)
	assert.NotNil(t, rec.Stash)
}

func TestBarePodReplacementAlreadyThereClearsTheStash(t *testing.T) {
	replacement := newPod(bare, func(p *corev1.Pod) { p.UID = "uid-new"; p.Spec.NodeName = "n2" })
	key := keyOf(replacement)
	old := stashOf(replacement)
	old.UID = "uid-1"
	h := newHarness(t, false, replacement, readyNode(),
		recordCM(t, key, Record{Nodes: map[string]time.Time{"n1": t0.Add(time.Hour)}, Stash: old}))

	h.reconcile(t, "team", replacement.Name)

	_, rec := h.record(t, key)
	assert.Nil(t, rec.Stash, "a later delete of the replacement must not resurrect it")
}

func TestBarePodCapAnnotatesThePod(t *testing.T) {
	pod := newPod(bare)
	key := keyOf(pod)
	h := newHarness(t, false, pod, lostNode(), recordCM(t, key, Record{Reschedules: 10, RoundStart: t0.Add(-time.Hour)}))

	h.reconcile(t, "team", pod.Name)

	got := &corev1.Pod{}
	require.NoError(t, h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
	assert.Equal(t, "10", got.Annotations[contract.AnnotationReschedulesExhausted])
	assert.Zero(t, h.removals())
}

func TestRecordBoundedAndExpired(t *testing.T) {
	pod := newPod()
	key := keyOf(pod)
	var rec Record
	for i := 0; i < 20; i++ {
		now := t0.Add(time.Duration(i) * time.Minute)
		rec.AddNode(fmt.Sprintf("n%02d", i), now.Add(-time.Hour), now, time.Hour, configv1alpha1.DefaultMaxBadNodes)
	}
	require.Len(t, rec.Nodes, configv1alpha1.DefaultMaxBadNodes, "bounded at 16")
	assert.NotContains(t, rec.Nodes, "n00", "the oldest go first")
	assert.Contains(t, rec.Nodes, "n19")

	// A hand-made record over the bound, with expired entries: the store
	// returns only live ones, and never more than 16.
	big := Record{Nodes: map[string]time.Time{}}
	for i := 0; i < 30; i++ {
		big.Nodes[fmt.Sprintf("x%02d", i)] = t0.Add(time.Duration(i-5) * time.Minute) // x00..x05 expired at t0
	}
	h := newHarness(t, false, recordCM(t, key, big))
	store := newBadNodeStore(h.c, testOptions(), jobs.Builtin(), ownNS, h.clock)
	nodes, err := avoided(store, pod)
	require.NoError(t, err)
	assert.Len(t, nodes, 16)
	assert.True(t, sort.StringsAreSorted(nodes))
	assert.Equal(t, "x14", nodes[0], "the 16 latest-expiring")

	h.clock.Step(time.Hour)
	nodes, err = avoided(store, pod)
	require.NoError(t, err)
	assert.Empty(t, nodes, "expired records are ignored")
}

func TestStoreIgnoresForeignConfigMapsAndMissingRecords(t *testing.T) {
	pod := newPod()
	key := keyOf(pod)
	unlabelled := recordCM(t, key, Record{Nodes: map[string]time.Time{"n1": t0.Add(time.Hour)}})
	unlabelled.Labels = nil
	// A tenant's copy of a valid record, in the tenant's namespace.
	tenant := recordCM(t, key, Record{Nodes: map[string]time.Time{"n2": t0.Add(time.Hour)}})
	tenant.Namespace = "team"
	h := newHarness(t, false, unlabelled, tenant)
	store := newBadNodeStore(h.c, testOptions(), jobs.Builtin(), ownNS, h.clock)

	nodes, err := avoided(store, pod)
	require.NoError(t, err)
	assert.Empty(t, nodes)
	nodes, err = avoided(store, newPod(func(p *corev1.Pod) { p.OwnerReferences[0].Name = "other" }))
	require.NoError(t, err)
	assert.Empty(t, nodes)

	// A record of another job, renamed to this job's record: ignored.
	other := keyOf(newPod(func(p *corev1.Pod) { p.OwnerReferences[0].Name = "other" }))
	forged := recordCM(t, other, Record{Nodes: map[string]time.Time{"n3": t0.Add(time.Hour)}})
	forged.Name = RecordName(key)
	h3 := newHarness(t, false, forged)
	nodes, err = avoided(newBadNodeStore(h3.c, testOptions(), jobs.Builtin(), ownNS, h3.clock), pod)
	require.NoError(t, err)
	assert.Empty(t, nodes)

	disabled := testOptions()
	disabled.Enabled = ptr.To(false)
	h2 := newHarness(t, false, recordCM(t, key, Record{Nodes: map[string]time.Time{"n1": t0.Add(time.Hour)}}))
	nodes, err = avoided(NewBadNodeStore(h2.c, disabled, jobs.Builtin(), ownNS), pod)
	require.NoError(t, err)
	assert.Empty(t, nodes)
}

func TestPodsOnNode(t *testing.T) {
	on := newPod()
	off := newPod(func(p *corev1.Pod) { p.Name = "elsewhere"; p.Spec.NodeName = "n2" })
	h := newHarness(t, false, on, off)
	reqs := h.r.podsOnNode(context.Background(), readyNode())
	assert.Equal(t, []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team", Name: on.Name}}}, reqs)
}

func TestCacheByObject(t *testing.T) {
	got := map[string]string{}
	for obj, by := range CacheByObject(ownNS, jobs.Builtin()) {
		desc := fmt.Sprintf("label=%v namespaces=%v transform=%v", by.Label, keysOf(by.Namespaces), by.Transform != nil)
		got[fmt.Sprintf("%T", obj)] = desc
	}
	assert.Equal(t, map[string]string{
		"*v1.Pod":       "label=trainguard.io/managed=true namespaces=[] transform=true",
		"*v1.ConfigMap": "label=trainguard.io/bad-nodes=true namespaces=[trainguard-system] transform=false",
		"*v1.Node":      "label=<nil> namespaces=[] transform=true",
		"*v1.Lease":     "label=<nil> namespaces=[kube-node-lease] transform=true",
	}, got)
}

func keysOf[V any](m map[string]V) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1, m2 := newMetrics(), newMetrics()
	require.NoError(t, m1.register(reg))
	require.NoError(t, m2.register(reg))
	m2.decisions.WithLabelValues("X").Inc()
	assert.Equal(t, 1.0, testutil.ToFloat64(m1.decisions.WithLabelValues("X")), "the second Setup reuses the registered counters")
}

func TestRecordRoundTrip(t *testing.T) {
	pod := newPod(bare)
	key := keyOf(pod)
	in := Record{Nodes: map[string]time.Time{"a": t0}, Reschedules: 2, RoundStart: t0, Stash: stashOf(pod)}
	cm := recordCM(t, key, in)
	var nodes map[string]string
	require.NoError(t, json.Unmarshal([]byte(cm.Data[dataNodes]), &nodes))
	assert.Equal(t, map[string]string{"a": "2025-06-01T12:00:00Z"}, nodes, "data is JSON {node: expiry}")
	out, err := decodeRecord(cm, key)
	require.NoError(t, err)
	assert.Equal(t, in.Nodes, out.Nodes)
	assert.Equal(t, in.Reschedules, out.Reschedules)
	assert.Equal(t, "elastic-0", out.Stash.Name)

	bad := cm.DeepCopy()
	bad.Data[dataNodes] = "{not json"
	_, err = decodeRecord(bad, key)
	assert.Error(t, err)
}

func keys(m map[string]time.Time) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// removals counts evictions and deletes: every way the controller removes a pod.
func (h *harness) removals() int { return len(h.deletes) + len(h.evictions) }

// TransformPod keeps what JobKeyOf and the policy read, drops the rest.
func TestTransformPodKeepsOnlyWhatIsRead(t *testing.T) {
	pod := newPod(annotation(contract.AnnotationMaxReschedules, "3"), annotation("team.example.com/notes", strings.Repeat("x", 4096)),
		label("unrelated", "x"), label(contract.LabelMindClusterFaultScheduling, "force"), exited(137, "Error"))
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "BIG", Value: strings.Repeat("y", 4096)}}
	pod.Status.Message = strings.Repeat("z", 1000)
	out, err := stripPod(pod.DeepCopy())
	require.NoError(t, err)
	got := out.(*corev1.Pod)
	assert.Equal(t, keyOf(pod), keyOf(got))
	assert.Equal(t, map[string]string{contract.AnnotationMaxReschedules: "3"}, got.Annotations)
	assert.Equal(t, map[string]string{contract.LabelManaged: "true", kubeflowv1.LabelJobName: "job", contract.LabelMindClusterFaultScheduling: "force"}, got.Labels)
	assert.Equal(t, []corev1.Container{{Name: "pytorch"}}, got.Spec.Containers)
	assert.Len(t, got.Status.Message, maxKeptMessage+3)
	assert.Equal(t, int32(137), got.Status.ContainerStatuses[0].State.Terminated.ExitCode)
	tomb := toolscacheTombstone()
	same, err := stripPod(tomb)
	require.NoError(t, err)
	assert.Equal(t, tomb, same, "anything but a pod passes unchanged")
}

// The pods of a JobSet (Trainer v2) keep the labels their job identity is
// read from, and a terminated container keeps its checkpoint outcome line
// (for the outcome reader that shares this cache) and nothing else of its
// message.
func TestTransformPodKeepsJobSetIdentityAndOutcomeLine(t *testing.T) {
	pod := newPod(label(trainerv1alpha1.LabelJobSetName, "resilient"), label(trainerv1alpha1.LabelJobSetReplicatedJob, "node"), label(trainerv1alpha1.LabelJobSetJobIndex, "0"),
		exited(137, "Error"))
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "resilient-node-0", UID: "u", Controller: builders.Ptr(true)}}
	line := contract.CheckpointOutcomePrefix + `{"outcome":"saved","step":3,"bytes":10,"seconds":0.5}`
	pod.Status.ContainerStatuses[0].State.Terminated.Message = strings.Repeat("user output\n", 300) + line + "\n"
	out, err := stripPod(pod.DeepCopy())
	require.NoError(t, err)
	got := out.(*corev1.Pod)
	assert.Equal(t, keyOf(pod), keyOf(got))
	assert.Equal(t, "JobSet", keyOf(got).Kind)
	assert.Equal(t, line, got.Status.ContainerStatuses[0].State.Terminated.Message)
}

// Two pods of one job, decoded apart as the informer decodes them, share
// the strings they have in common once cached (namespace, node, label and
// annotation keys and values, the job's reference): at 50,000 pods the
// copies were a tenth of the cache. The values are unchanged.
func TestTransformPodInternsRecurringStrings(t *testing.T) {
	decode := func(p *corev1.Pod) *corev1.Pod {
		raw, err := json.Marshal(p)
		require.NoError(t, err)
		out := &corev1.Pod{}
		require.NoError(t, json.Unmarshal(raw, out))
		return out
	}
	pod := newPod(annotation(contract.AnnotationMaxReschedules, "3"), label(contract.LabelMindClusterFaultScheduling, "force"))
	a1, err := stripPod(decode(pod))
	require.NoError(t, err)
	a2, err := stripPod(decode(pod))
	require.NoError(t, err)
	p1, p2 := a1.(*corev1.Pod), a2.(*corev1.Pod)
	assert.Equal(t, p1, p2, "the same pod transforms the same")
	assert.Equal(t, keyOf(pod), keyOf(p1))
	same := func(what, x, y string) {
		t.Helper()
		assert.Same(t, unsafe.StringData(x), unsafe.StringData(y), "%s %q is held once", what, x)
	}
	same("namespace", p1.Namespace, p2.Namespace)
	same("node", p1.Spec.NodeName, p2.Spec.NodeName)
	same("owner name", p1.OwnerReferences[0].Name, p2.OwnerReferences[0].Name)
	same("owner uid", string(p1.OwnerReferences[0].UID), string(p2.OwnerReferences[0].UID))
	for _, m := range []func(*corev1.Pod) map[string]string{(*corev1.Pod).GetLabels, (*corev1.Pod).GetAnnotations} {
		k1, k2 := keysOf(m(p1)), keysOf(m(p2))
		require.Equal(t, k1, k2)
		for i, k := range k1 {
			same("key", k, k2[i])
			same("value of "+k, m(p1)[k], m(p2)[k2[i]])
		}
	}
}

func toolscacheTombstone() any { return "not a pod" }

// liveReader serves the API server's copy of a pod: the cached copy in the
// fake client with a newer resourceVersion, as after an eviction the
// informer has not delivered yet.
type liveReader struct {
	client.Reader
	resourceVersion string
}

func (l liveReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := l.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if _, ok := obj.(*corev1.Pod); ok {
		obj.SetResourceVersion(l.resourceVersion)
	}
	return nil
}

func TestStaleCacheNeverActsTwice(t *testing.T) {
	pod := newPod()
	h := newHarness(t, false, pod, lostNode())
	h.r.apiReader = liveReader{Reader: h.c, resourceVersion: "999999"}

	res := h.reconcile(t, "team", pod.Name)

	assert.True(t, h.podExists(t, "team", pod.Name), "nothing done on a stale copy")
	assert.Zero(t, h.removals())
	assert.Equal(t, staleRetry, res.RequeueAfter, "decided again soon, on the newer copy")
	assert.Empty(t, h.drainEvents(), "no decision reported")
	err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ownNS, Name: RecordName(keyOf(pod))}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "no bad node recorded, no round counted: %v", err)

	h.r.apiReader = h.c // the informer caught up: the same copy
	h.reconcile(t, "team", pod.Name)
	assert.False(t, h.podExists(t, "team", pod.Name), "evicted once the copy is current")
}

// avoided is every node the store says pod avoids, required or preferred.
func avoided(store podspec.NodeAvoider, pod *corev1.Pod) ([]string, error) {
	a, err := store.AvoidNodes(context.Background(), pod)
	nodes := append(append([]string{}, a.Required...), a.Preferred...)
	sort.Strings(nodes)
	return nodes, err
}
