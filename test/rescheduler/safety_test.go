package rescheduler

// Issue 10 acceptance: no tenant can steer the rescheduler, and no outage
// becomes a deletion storm. Each test reproduces an attack or an incident
// against the real API server; each failed on the code before the fix.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/test/controlplane"
)

// settle is how long a test watches for an action that must not happen,
// after a sentinel proved the controller is processing events.
const settle = 2 * time.Second

// plainNamespace creates a namespace that never opted in.
func plainNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("plain-%d", nsCounter.Add(1))
	require.NoError(t, env.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

// oldRecordName is where the code before issue 10 looked for a job's
// record: in the job's own namespace, where its users can write.
func oldRecordName(podName string) string {
	sum := sha256.Sum256([]byte("Pod./" + podName))
	return "trainguard-bad-nodes-" + podName + "-" + hex.EncodeToString(sum[:])[:10]
}

// hostilePod is what an attacker wants trainguard to create: privileged,
// host PID, the node's root filesystem, a kube-system service account.
func hostilePod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{contract.LabelManaged: "true"}},
		Spec: corev1.PodSpec{
			HostPID:            true,
			ServiceAccountName: "node-admin",
			Containers: []corev1.Container{{
				Name: "pytorch", Image: "example.com/root:1",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "root", MountPath: "/host"}},
			}},
			Volumes: []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		},
	}
}

// tenantRecord is a ConfigMap a tenant writes in its namespace, in the
// old record format: a pending pod to "recreate".
func tenantRecord(t *testing.T, ns, podName string, pending *corev1.Pod, replacesUID string, pad int) *corev1.ConfigMap {
	t.Helper()
	if pad > 0 {
		pending.Annotations = map[string]string{"pad": strings.Repeat("x", pad)}
	}
	raw, err := json.Marshal(pending)
	require.NoError(t, err)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: oldRecordName(podName), Labels: map[string]string{contract.LabelBadNodes: "true"}},
		Data: map[string]string{"nodes": "{}", "reschedules": "0", "job": ns + "/Pod./" + podName,
			"pendingPod": string(raw), "replacesUID": replacesUID},
	}
	require.NoError(t, env.c.Create(context.Background(), cm))
	return cm
}

// The tenant takeover of issue 10, and its variants: ConfigMaps labelled
// trainguard.io/bad-nodes=true that a namespace user wrote. None of them is
// read (they are outside trainguard's namespace, so not even cached), and
// no pod is created anywhere; a legitimate bare pod recreated meanwhile
// proves the controller was working, from the pod it observed.
func TestTenantConfigMapsAreNeverActedOn(t *testing.T) {
	ctx := context.Background()
	tenant, victim := plainNamespace(t), namespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "node-admin"}}
	if err := env.c.Create(ctx, sa); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err) // so the old code's Create would have succeeded
	}
	type attack struct{ ns, name, podNS string }
	attacks := []attack{
		{tenant, "takeover", "kube-system"},               // the attack
		{tenant, "cross-namespace", victim},               // a stash naming another namespace
		{victim, "no-such-uid", victim},                   // a pod UID that never existed
		{tenant, "one-mebibyte", tenant},                  // a 1 MiB payload
		{victim, "takeover-from-opted-in", "kube-system"}, // the same from an opted-in namespace
	}
	for i, a := range attacks {
		pad := 0
		if a.name == "one-mebibyte" {
			pad = 1000 * 1024
		}
		tenantRecord(t, a.ns, a.name, hostilePod(a.podNS, a.name), fmt.Sprintf("00000000-0000-0000-0000-%012d", i), pad)
	}

	// A legitimate bare pod, evicted and recreated from what trainguard observed.
	node := readyNode(t, victim, "a")
	legit := barePod(victim, "legit").onNode(node).create(t)
	exited(t, legit, 137)
	var replacement corev1.Pod
	require.Eventually(t, func() bool {
		err := env.c.Get(ctx, client.ObjectKeyFromObject(legit), &replacement)
		return err == nil && replacement.UID != legit.UID
	}, waitFor, tick, "the legitimate bare pod is recreated")
	assert.Equal(t, legit.Spec.Containers[0].Image, replacement.Spec.Containers[0].Image)
	assert.False(t, replacement.Spec.HostPID)
	time.Sleep(settle)

	var all corev1.PodList
	require.NoError(t, env.c.List(ctx, &all))
	for _, p := range all.Items {
		for _, a := range attacks {
			assert.NotEqual(t, a.name, p.Name, "pod %s/%s was created from a tenant's ConfigMap", p.Namespace, p.Name)
		}
		assert.False(t, p.Spec.HostPID, "pod %s/%s has hostPID", p.Namespace, p.Name)
	}
	assert.NotContains(t, env.shared.logText(t), "takeover", "the tenant's ConfigMaps are not even read")
}

// forgedRecord writes a record into trainguard's own namespace, as a buggy
// or compromised writer might.
func forgedRecord(t *testing.T, key jobs.Key, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace, Name: name, Labels: map[string]string{contract.LabelBadNodes: "true"}},
		Data:       map[string]string{"nodes": "{}", "reschedules": "0", "job": key.String(), "jobAPIVersion": key.APIVersion},
	}
	for k, v := range data {
		cm.Data[k] = v
	}
	require.NoError(t, env.c.Create(context.Background(), cm))
	return cm
}

func stashJSON(t *testing.T, ns, name string, pad int) string {
	t.Helper()
	p := hostilePod(ns, name)
	s := map[string]any{"namespace": ns, "name": name, "uid": "11111111-2222-3333-4444-555555555555", "spec": p.Spec}
	if pad > 0 {
		s["annotations"] = map[string]string{"pad": strings.Repeat("x", pad)}
	}
	raw, err := json.Marshal(s)
	require.NoError(t, err)
	return string(raw)
}

// Records in trainguard's namespace that fail to parse or do not match
// their job are ignored with an Event, a metric and a log line, and never
// acted on: a stash naming another namespace, a 1 MiB stash, another job's
// record under this job's name, unparseable data.
func TestInvalidRecordsAreIgnoredWithAnEvent(t *testing.T) {
	ctx := context.Background()
	victim := namespace(t)
	node := readyNode(t, victim, "a")
	bare := func(name string) jobs.Key {
		return jobs.Key{Namespace: victim, APIVersion: "v1", Kind: "Pod", Name: name}
	}
	before := metricValue(t, env.shared, "trainguard_rescheduler_records_ignored_total")

	// Stashes reconciled through the record watch: their pod does not exist.
	other := forgedRecord(t, bare("elsewhere"), resched.RecordName(bare("elsewhere")), map[string]string{"stash": stashJSON(t, "kube-system", "elsewhere", 0)})
	big := forgedRecord(t, bare("big"), resched.RecordName(bare("big")), map[string]string{"stash": stashJSON(t, victim, "big", 900*1024)})
	// Records read when their pod is reconciled.
	running(t, barePod(victim, "mismatch").onNode(node).create(t))
	theirs := jobs.Key{Namespace: plainNamespace(t), APIVersion: "v1", Kind: "Pod", Name: "mismatch"}
	mismatch := forgedRecord(t, theirs, resched.RecordName(bare("mismatch")), nil)
	running(t, barePod(victim, "garbage").onNode(node).create(t))
	garbage := forgedRecord(t, bare("garbage"), resched.RecordName(bare("garbage")), map[string]string{"nodes": "{not json"})
	// Make both pods reconcile again now that their records exist.
	for _, name := range []string{"mismatch", "garbage"} {
		p := &corev1.Pod{}
		require.NoError(t, env.c.Get(ctx, client.ObjectKey{Namespace: victim, Name: name}, p))
		exited(t, p, 1) // a permanent failure: reconciled, never migrated
	}

	for _, cm := range []*corev1.ConfigMap{other, big, mismatch, garbage} {
		e := waitObjectEvent(t, cm, resched.ReasonRecordIgnored)
		assert.Equal(t, corev1.EventTypeWarning, e.Type)
		assert.Contains(t, e.Note, "nothing acted on")
		t.Logf("%s: %s", cm.Name, e.Note)
	}
	assert.GreaterOrEqual(t, metricValue(t, env.shared, "trainguard_rescheduler_records_ignored_total")-before, 4.0)
	assert.Contains(t, env.shared.logText(t), "bad-node record ignored, nothing acted on")
	time.Sleep(settle)
	for _, ref := range []client.ObjectKey{{Namespace: "kube-system", Name: "elsewhere"}, {Namespace: victim, Name: "elsewhere"}, {Namespace: victim, Name: "big"}} {
		err := env.c.Get(ctx, ref, &corev1.Pod{})
		assert.True(t, apierrors.IsNotFound(err), "no pod %s is created from an invalid record: %v", ref, err)
	}
}

// A pod carrying trainguard.io/managed=true in a namespace that never opted
// in (anyone can set the label): the rescheduler leaves it alone.
func TestManagedLabelOutsideOptedInNamespaceIsIgnored(t *testing.T) {
	ctx := context.Background()
	plain, opted := plainNamespace(t), namespace(t)
	node := readyNode(t, plain, "a")
	fake := barePod(plain, "self-labelled").label(contract.LabelManaged, "true").onNode(node).obj()
	require.NoError(t, env.c.Create(ctx, fake))
	exited(t, fake, 137)

	sentinel := barePod(opted, "sentinel").onNode(readyNode(t, opted, "a")).create(t)
	exited(t, sentinel, 137)
	waitDeleted(t, sentinel)
	time.Sleep(settle)
	cur := getPod(t, fake)
	require.NotNil(t, cur, "the pod in the namespace that never opted in still exists")
	assert.Nil(t, cur.DeletionTimestamp)
	assert.Empty(t, podEvents(t, fake))
}

// cordon marks the node unschedulable, as `kubectl cordon` does, with the
// taint the node lifecycle controller adds.
func cordon(t *testing.T, name string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := env.c.Get(context.Background(), client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		node.Spec.Unschedulable = true
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
		return env.c.Update(context.Background(), node)
	}))
}

// A cordon is not a failure: 20 managed pods of 20 jobs on a cordoned node
// are left alone. A drain then reaches one of them as an eviction (the
// DisruptionTarget condition, its own grace period for the preStop hook),
// and trainguard adds nothing to it.
func TestCordonActsOnNothing(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	node := readyNode(t, ns, "cordoned")
	var pods []*corev1.Pod
	for i := range 20 {
		p := workerOf(t, pytorchJob(t, ns, fmt.Sprintf("job-%d", i), nil)).onNode(node).create(t)
		running(t, p)
		pods = append(pods, p)
	}
	cordon(t, node)

	sentinel := workerOf(t, pytorchJob(t, ns, "sentinel", nil)).onNode(readyNode(t, ns, "other")).create(t)
	exited(t, sentinel, 137)
	waitDeleted(t, sentinel)
	time.Sleep(settle)
	for _, p := range pods {
		cur := getPod(t, p)
		require.NotNil(t, cur, "pod %s exists", p.Name)
		assert.Nil(t, cur.DeletionTimestamp, "pod %s on the cordoned node is neither deleted nor evicted", p.Name)
		assert.Empty(t, reasons(podEvents(t, p)), "no decision about pod %s", p.Name)
		assert.Nil(t, record(t, p), "no bad node recorded for %s", p.Name)
	}

	// The drain: kubectl drain evicts.
	drained := pods[0]
	require.NoError(t, env.c.SubResource("eviction").Create(ctx, drained, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: drained.Name}}))
	cur := waitTerminating(t, drained)
	time.Sleep(settle)
	cur = getPod(t, cur)
	require.NotNil(t, cur, "the kubelet (simulated) has not confirmed: the pod is still terminating")
	assert.Equal(t, *drained.Spec.TerminationGracePeriodSeconds, *cur.DeletionGracePeriodSeconds, "its own grace period: the preStop hook runs")
	assert.Empty(t, reasons(podEvents(t, drained)), "trainguard adds nothing to a drain")
}

// metricValue sums the samples of a metric family on the manager's /metrics.
func metricValue(t *testing.T, m *manager, family string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + m.metricsAddr + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family+" ") && !strings.HasPrefix(line, family+"{") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		require.NoError(t, err)
		sum += v
	}
	return sum
}

// waitObjectEvent waits for an Event with the reason about any object.
func waitObjectEvent(t *testing.T, obj client.Object, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	require.Eventually(t, func() bool {
		var list eventsv1.EventList
		require.NoError(t, env.c.List(context.Background(), &list, client.InNamespace(obj.GetNamespace())))
		for _, e := range list.Items {
			if e.Regarding.Name == obj.GetName() && e.Reason == reason {
				found = e
				return true
			}
		}
		return false
	}, waitFor, tick, "an Event %s about %s", reason, obj.GetName())
	return found
}

// setPodReady reports the pod running and Ready, so a PodDisruptionBudget
// counts it healthy.
func setPodReady(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "pytorch", Image: "example.com/train:1", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}}
	})
}

// setPDBStatus plays the disruption controller (not part of envtest).
func setPDBStatus(t *testing.T, pdb *policyv1.PodDisruptionBudget, allowed, healthy, desired int32) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &policyv1.PodDisruptionBudget{}
		if err := env.c.Get(context.Background(), client.ObjectKeyFromObject(pdb), cur); err != nil {
			return err
		}
		cur.Status = policyv1.PodDisruptionBudgetStatus{
			ObservedGeneration: cur.Generation, DisruptionsAllowed: allowed,
			CurrentHealthy: healthy, DesiredHealthy: desired, ExpectedPods: 1,
		}
		return env.c.Status().Update(context.Background(), cur)
	}))
}

// A PodDisruptionBudget with minAvailable equal to the replicas: the
// eviction is refused, trainguard waits and retries with backoff (Events
// EvictionBlocked), never deletes past it, and evicts once the budget
// allows.
func TestPDBIsNeverBypassed(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	node := readyNode(t, ns, "a")
	job := pytorchJob(t, ns, "guarded", nil)
	pod := workerOf(t, job).onNode(node).create(t)
	setPodReady(t, pod)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guarded"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)), // = replicas
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"training.kubeflow.org/job-name": "guarded"}},
		},
	}
	require.NoError(t, env.c.Create(ctx, pdb))
	setPDBStatus(t, pdb, 0, 1, 1)

	// Lost past the grace, far from --force-delete-after.
	setNodeReady(t, node, corev1.ConditionFalse, time.Now().Add(-2*testNodeLostGrace))
	e := waitEvent(t, pod, resched.ReasonEvictionBlocked)
	assert.Contains(t, e.Note, "never bypassed")
	require.Eventually(t, func() bool { return heldAbout(t, env.shared, ns, pod.Name, resched.ReasonEvictionBlocked) >= 3 },
		waitFor, tick, "refused evictions are retried")
	cur := getPod(t, pod)
	require.NotNil(t, cur)
	assert.Nil(t, cur.DeletionTimestamp, "never deleted past the budget")

	setPDBStatus(t, pdb, 1, 1, 1)
	deleting := waitTerminating(t, pod)
	assert.Equal(t, *pod.Spec.TerminationGracePeriodSeconds, *deleting.DeletionGracePeriodSeconds, "evicted gracefully once allowed")
	waitEvent(t, pod, resched.ReasonGracefulDelete)
}

// heldAbout counts the manager's "action held" log lines about a pod.
func heldAbout(t *testing.T, m *manager, ns, pod, reason string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(m.logText(t), "\n") {
		if strings.Contains(line, `"msg":"rescheduler action held"`) && strings.Contains(line, fmt.Sprintf(`"pod":"%s/%s"`, ns, pod)) &&
			strings.Contains(line, `"held":"`+reason+`"`) {
			n++
		}
	}
	return n
}

// 6 of 10 nodes carrying managed pods go NotReady at once: a suspected
// partition. The brake engages (Event, metric, log line) and nothing is
// evicted. When 3 of them come back (3 of 10 unhealthy, under the
// threshold), the token bucket lets at most --node-eviction-burst nodes be
// acted on; the others wait (NodeRateLimited).
func TestPartitionBrakeAndNodeRate(t *testing.T) {
	const burst = 2
	env.replaceShared(t)
	opts := defaultOptions()
	opts.NodeEvictionRate, opts.NodeEvictionBurst = ptr.To(float64(0.001)), burst // one more node every 1000 s: none during the test
	m := env.startManagerForTest(t, managerOptions{Rescheduler: opts})

	ns := namespace(t)
	nodes := make([]string, 10)
	pods := make([]*corev1.Pod, 10)
	for i := range nodes {
		nodes[i] = readyNode(t, ns, fmt.Sprintf("n%d", i))
		pods[i] = workerOf(t, pytorchJob(t, ns, fmt.Sprintf("job-%d", i), nil)).onNode(nodes[i]).create(t)
		running(t, pods[i])
	}
	// All six within milliseconds: the grace (2 s) ends for all of them together.
	down := time.Now()
	for i := range 6 {
		setNodeReady(t, nodes[i], corev1.ConditionUnknown, down)
	}
	e := waitEventOnAny(t, pods[:6], resched.ReasonPartitionSuspected)
	assert.Contains(t, e.Note, "6 of 10 nodes")
	assert.Contains(t, e.Note, "suspected partition")
	assert.Contains(t, e.Note, "held by this brake so far")
	require.Eventually(t, func() bool { return metricValue(t, m, "trainguard_rescheduler_brake_engaged", `zone="`+ns+`"`) == 1 },
		waitFor, tick, "the brake's gauge says it is engaged")
	assert.Equal(t, 6.0, metricValue(t, m, "trainguard_rescheduler_zone_unhealthy_nodes", `zone="`+ns+`"`))
	assert.Contains(t, m.logText(t), "rescheduler brake engaged")
	time.Sleep(settle)
	assert.Zero(t, acted(t, pods), "nothing is evicted while the brake holds")

	for i := 3; i < 6; i++ {
		setNodeReady(t, nodes[i], corev1.ConditionTrue, time.Now())
	}
	require.Eventually(t, func() bool { return acted(t, pods[:3]) == burst }, waitFor, tick, "the burst of nodes is acted on")
	waitEvent(t, pods[acted3(t, pods[:3])], resched.ReasonNodeRateLimited)
	time.Sleep(settle)
	assert.Equal(t, burst, acted(t, pods), "at most --node-eviction-burst nodes acted on")
	assert.Zero(t, metricValue(t, m, "trainguard_rescheduler_brake_engaged", `zone="`+ns+`"`), "released")
}

// acted counts the pods evicted or deleted.
func acted(t *testing.T, pods []*corev1.Pod) int {
	t.Helper()
	n := 0
	for _, p := range pods {
		if cur := getPod(t, p); cur == nil || cur.DeletionTimestamp != nil {
			n++
		}
	}
	return n
}

// acted3 returns the index of the pod not acted on.
func acted3(t *testing.T, pods []*corev1.Pod) int {
	t.Helper()
	for i, p := range pods {
		if cur := getPod(t, p); cur != nil && cur.DeletionTimestamp == nil {
			return i
		}
	}
	require.FailNow(t, "every pod was acted on")
	return -1
}
