package rescheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
)

func lease(node string, renewed time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: NodeLeaseNamespace}}
	rt := metav1.NewMicroTime(renewed)
	l.Spec.RenewTime = &rt
	return l
}

// Silence is measured on trainguard's clock from the renewal it saw, never
// from the renewTime the kubelet wrote.
func TestLeaseSilenceIsObservedNotRead(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	l := newLeases(clk)
	lost := 40 * time.Second

	_, known := l.silentFor("n1")
	assert.False(t, known, "no Lease seen: unknown, judged by Ready only")
	// A node whose clock is an hour behind: its renewTime looks ancient.
	assert.False(t, l.observe(lease("n1", t0.Add(-time.Hour)), lost))
	silent, known := l.silentFor("n1")
	assert.True(t, known)
	assert.Zero(t, silent, "first seen counts as renewed now (also after a restart or a leader change)")

	clk.Step(30 * time.Second)
	assert.False(t, l.observe(lease("n1", t0.Add(-time.Hour)), lost), "30 s without a renewal: a slow kubelet, not lost")
	clk.Step(10 * time.Second)
	assert.True(t, l.observe(lease("n1", t0.Add(-time.Hour)), lost), "40 s: silent, its pods are enqueued")
	assert.False(t, l.observe(lease("n1", t0.Add(-time.Hour)), lost), "once per silence")
	silent, _ = l.silentFor("n1")
	assert.Equal(t, 40*time.Second, silent)

	assert.False(t, l.observe(lease("n1", t0.Add(-time.Hour+10*time.Second)), lost), "renewed again")
	silent, _ = l.silentFor("n1")
	assert.Zero(t, silent)

	l.forget(map[string]bool{})
	_, known = l.silentFor("n1")
	assert.False(t, known, "a Lease that is gone is forgotten")
}

func silentInput(pod *corev1.Pod, node *corev1.Node, silent time.Duration) Input {
	return Input{Pod: pod, Node: node, Now: t0, KubeletSilentFor: silent, LeaseKnown: true,
		TrainingContainers: []string{"pytorch"}, MaxReschedules: 10}
}

func TestSilentKubeletIsLostBeforeNotReady(t *testing.T) {
	opts := DefaultOptions()
	d := Decide(silentInput(newPod(), readyNode(), 24*time.Second), opts)
	assert.Equal(t, ActionNone, d.Action, "a kubelet that renewed within --lease-lost-after is never acted on: %+v", d)

	d = Decide(silentInput(newPod(), readyNode(), 26*time.Second), opts)
	assert.Equal(t, ActionEvict, d.Action, "Ready still True, but the kubelet has been silent for --lease-lost-after")
	assert.Equal(t, ReasonNodeLost, d.Cause)
	assert.Contains(t, d.Message, "kubelet silent for 26s, its Lease not renewed (--lease-lost-after 25s)")

	d = Decide(silentInput(newPod(), cordoned(readyNode()), 5*time.Second), opts)
	assert.Equal(t, ActionNone, d.Action, "a cordon is not a failure")
}

// A kubelet back from the dead posts Ready=True before its first Lease
// renewal reaches the cache: the node is up, and its new pods stay (on the
// cluster, a job placed on a node just restarted lost both pods and
// recorded a strike against it). Silence counts again from that Ready.
func TestReadyAgainIsTheKubeletSpeaking(t *testing.T) {
	opts := DefaultOptions()
	back := newNode("n1", corev1.ConditionTrue, 3*time.Second)
	d := Decide(silentInput(newPod(), back, 52*time.Second), opts)
	assert.Equal(t, ActionNone, d.Action, "Ready=True 3 s ago, Lease silent 52 s: %+v", d)

	d = Decide(silentInput(newPod(), newNode("n1", corev1.ConditionTrue, 26*time.Second), 52*time.Second), opts)
	assert.Equal(t, ActionEvict, d.Action, "silent again for --lease-lost-after since that Ready")
	assert.Contains(t, d.Message, "kubelet silent for 26s")

	d = Decide(silentInput(newPod(), newNode("n1", corev1.ConditionUnknown, 3*time.Second), 52*time.Second), opts)
	assert.Equal(t, ActionEvict, d.Action, "a transition to Unknown is the node lifecycle controller's, not the kubelet speaking")
	assert.Contains(t, d.Message, "kubelet silent for 52s")
}

// The graceful delete of a pod on a silent node is escalated without
// waiting --grace-over-time: no kubelet is there to carry it out.
func TestSilentKubeletGracefulDeleteIsForcedAtTheBound(t *testing.T) {
	opts := DefaultOptions()
	pod := newPod(terminating(time.Second))
	d := Decide(silentInput(pod, readyNode(), 26*time.Second), opts)
	assert.Equal(t, ActionForceDelete, d.Action, "%+v", d)
	assert.Contains(t, d.Message, "node n1 unreachable (kubelet silent, Lease not renewed) for 26s, past --force-delete-after=25s; the kubelet cannot carry out the graceful delete")

	opts.ForceDeleteAfter.Duration = time.Minute
	d = Decide(silentInput(pod, readyNode(), 41*time.Second), opts)
	assert.Equal(t, ActionWait, d.Action, "below the bound: wait for it")
	assert.Equal(t, 19*time.Second, d.RequeueAfter)

	// A kubelet that talks but reports NotReady may still carry out the
	// delete: --grace-over-time applies as before.
	opts = DefaultOptions()
	in := silentInput(pod, newNode("n1", corev1.ConditionFalse, 2*time.Minute), 0)
	d = Decide(in, opts)
	assert.Equal(t, ActionWait, d.Action, "%+v", d)
}
