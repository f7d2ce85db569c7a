package warning

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// fakeTrainers is a job's trainers: each pod IP acknowledges the step it
// is at and commits it after commitAfter status reads (never when < 0).
type fakeTrainers struct {
	mu          sync.Mutex
	requests    []string // pod IPs asked, in order
	reasons     []string
	down        map[string]bool // IPs that do not answer
	rateLimited bool
	step        int64
	commitAfter int
	reads       int
}

func (f *fakeTrainers) RequestCheckpoint(_ context.Context, ip, reason string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, ip)
	f.reasons = append(f.reasons, reason)
	switch {
	case f.down[ip]:
		return 0, fmt.Errorf("dial tcp %s:9602: connect: connection refused", ip)
	case f.rateLimited:
		return 0, ErrRateLimited
	}
	return f.step, nil
}

func (f *fakeTrainers) Status(_ context.Context, ip string) (int64, *int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	committed := f.step - 100 // the last periodic checkpoint
	if f.commitAfter >= 0 && f.reads > f.commitAfter {
		committed = f.step
	}
	return f.step, &committed, nil
}

func (f *fakeTrainers) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

type fixture struct {
	r        *Reconciler
	c        client.Client
	rec      *events.FakeRecorder
	trainers *fakeTrainers
	clock    *clocktesting.FakeClock
}

func newFixture(t *testing.T, w func(*configv1alpha1.NodeWarningsConfig), objs ...client.Object) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Annotations: map[string]string{contract.AnnotationInject: contract.InjectEnabled}}}
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}
	c := fake.NewClientBuilder().WithObjects(append([]client.Object{ns, other}, objs...)...).Build()
	cfg := configv1alpha1.Default()
	cfg.NodeWarnings.CommitTimeout = metav1.Duration{Duration: 300 * time.Millisecond}
	if w != nil {
		w(&cfg.NodeWarnings)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	rec := events.NewFakeRecorder(20)
	f := &fixture{c: c, rec: rec, trainers: &fakeTrainers{step: 1200, down: map[string]bool{}}, clock: clocktesting.NewFakeClock(time.Now())}
	f.r, err = New(Options{Client: c, APIReader: c, Recorder: rec, Config: cfg, Kinds: jobs.Builtin(), Namespace: "trainguard-system",
		Trainers: f.trainers, Clock: f.clock, Poll: 10 * time.Millisecond, metrics: m})
	require.NoError(t, err)
	return f
}

func (f *fixture) reconcile(t *testing.T, node string) reconcile.Result {
	t.Helper()
	ctx := logr.NewContext(context.Background(), logr.Discard())
	res, err := f.r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: node}})
	require.NoError(t, err)
	return res
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (f *fixture) requests(outcome string) float64 {
	return testutil.ToFloat64(f.r.metrics.requests.WithLabelValues(outcome))
}

func node(name string, conds ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	for _, c := range conds {
		typ, st, _ := configv1alpha1.ParseWarningCondition(c)
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, Status: st})
	}
	return n
}

// rank is a running managed pod of the PyTorchJob job on node.
func rank(ns, job string, i int, nodeName, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-worker-%d", job, i),
			Labels: map[string]string{contract.LabelManaged: "true", "training.kubeflow.org/job-name": job},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job, UID: types.UID(job + "-uid"),
				Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "pytorch", Image: "x"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
}

func TestAWarningNodeCheckpointsEachJobOnceThroughAPodElsewhere(t *testing.T) {
	f := newFixture(t, nil,
		node("n1", "MaintenancePlanned=True"), node("n2"), node("n3"),
		rank("team", "llm", 0, "n1", "10.0.1.1"), rank("team", "llm", 1, "n2", "10.0.2.1"), rank("team", "llm", 2, "n1", "10.0.1.2"),
		rank("team", "vit", 0, "n1", "10.0.1.3"),
		rank("team", "other", 0, "n3", "10.0.3.1"))
	f.trainers.commitAfter = 2
	f.reconcile(t, "n1")

	asked := f.trainers.asked()
	assert.ElementsMatch(t, []string{"10.0.2.1", "10.0.1.3"}, asked,
		"one request per job with a rank on n1: llm through its rank off the warning node, vit through its only one; not other")
	ev := f.events()
	require.Len(t, ev, 2)
	for _, e := range ev {
		assert.Contains(t, e, "Normal CheckpointOnWarning node n1 warns (MaintenancePlanned=True): step 1200 committed")
	}
	assert.Equal(t, 2.0, f.requests(OutcomeCommitted))
	assert.Contains(t, f.trainers.reasons[0], "node n1 warns: MaintenancePlanned=True")

	// The condition flaps: within the interval nobody is asked again.
	f.reconcile(t, "n1")
	assert.Len(t, f.trainers.asked(), 2, "no second request within nodeWarnings.minInterval")
	assert.Empty(t, f.events())
	assert.Equal(t, 2.0, testutil.ToFloat64(f.r.metrics.skipped.WithLabelValues(SkipInterval)))

	f.clock.Step(configv1alpha1.DefaultWarningMinInterval)
	f.reconcile(t, "n1")
	assert.Len(t, f.trainers.asked(), 4, "after the interval, each job once more")
}

func TestAHealthyNodeAsksNobody(t *testing.T) {
	f := newFixture(t, nil, node("n1", "MaintenancePlanned=False"), rank("team", "llm", 0, "n1", "10.0.1.1"))
	f.reconcile(t, "n1")
	f.reconcile(t, "gone")
	assert.Empty(t, f.trainers.asked())
	assert.Empty(t, f.events())
}

func TestPodsOutsideTheScopeAreNotAsked(t *testing.T) {
	// The managed label is anyone's: a pod of a namespace that did not opt
	// in, or of trainguard's own, gets nothing.
	f := newFixture(t, nil, node("n1", "DrainInProgress=True"),
		rank("elsewhere", "llm", 0, "n1", "10.0.1.1"), rank("trainguard-system", "x", 0, "n1", "10.0.1.2"), rank("kube-system", "y", 0, "n1", "10.0.1.3"))
	f.reconcile(t, "n1")
	assert.Empty(t, f.trainers.asked())
}

func TestATrainerThatDoesNotCommitIsReportedNotStopped(t *testing.T) {
	f := newFixture(t, nil, node("n1", "MaintenancePlanned=True"), node("n2"), rank("team", "llm", 0, "n1", "10.0.1.1"))
	f.trainers.commitAfter = -1
	start := time.Now()
	f.reconcile(t, "n1")
	assert.Less(t, time.Since(start), 3*time.Second, "bounded by nodeWarnings.commitTimeout")
	ev := f.events()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], "Warning TrainerDidNotAnswer node n1 warns (MaintenancePlanned=True): pod llm-worker-0's trainer acknowledged step 1200 but did not commit it within 300ms")
	assert.Contains(t, ev[0], "last committed step 1100")
	assert.Equal(t, 1.0, f.requests(OutcomeTimeout))
	var pods corev1.PodList
	require.NoError(t, f.c.List(context.Background(), &pods))
	assert.Len(t, pods.Items, 1, "nothing is stopped")
}

func TestUnreachablePodsAreTriedThenReported(t *testing.T) {
	f := newFixture(t, nil, node("n1", "MaintenancePlanned=True"), node("n2"),
		rank("team", "llm", 0, "n1", "10.0.1.1"), rank("team", "llm", 1, "n2", "10.0.2.1"))
	f.trainers.down = map[string]bool{"10.0.2.1": true}
	f.reconcile(t, "n1")
	assert.Equal(t, []string{"10.0.2.1", "10.0.1.1"}, f.trainers.asked(), "the next pod is tried when one does not answer")
	assert.Equal(t, 1.0, f.requests(OutcomeCommitted))

	f2 := newFixture(t, nil, node("n1", "MaintenancePlanned=True"), rank("team", "llm", 0, "n1", "10.0.1.1"))
	f2.trainers.down = map[string]bool{"10.0.1.1": true}
	f2.reconcile(t, "n1")
	ev := f2.events()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], "Warning TrainerDidNotAnswer node n1 warns (MaintenancePlanned=True): no trainer of the job answered the checkpoint-now request (llm-worker-0: dial tcp 10.0.1.1:9602: connect: connection refused)")
	assert.Equal(t, 1.0, f2.requests(OutcomeUnanswered))
}

func TestATrainersRefusalIsReported(t *testing.T) {
	f := newFixture(t, nil, node("n1", "MaintenancePlanned=True"), rank("team", "llm", 0, "n1", "10.0.1.1"))
	f.trainers.rateLimited = true
	f.reconcile(t, "n1")
	ev := f.events()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], "Normal CheckpointNowRateLimited")
	assert.Equal(t, 1.0, f.requests(OutcomeRateLimited))
	assert.Len(t, f.trainers.asked(), 1, "one pod's refusal is the job's: no other pod is asked")
}

func TestMassWarningEngagesTheBrake(t *testing.T) {
	f := newFixture(t, nil,
		node("n1", "MaintenancePlanned=True"), node("n2", "MaintenancePlanned=True"), node("n3"),
		rank("team", "a", 0, "n1", "10.0.1.1"), rank("team", "b", 0, "n2", "10.0.2.1"), rank("team", "c", 0, "n3", "10.0.3.1"))
	res := f.reconcile(t, "n1")
	f.reconcile(t, "n2")
	assert.Empty(t, f.trainers.asked(), "2 of 3 carriers warn: the source is suspected, nobody is asked")
	assert.Equal(t, brakeRecheck, res.RequeueAfter, "a held node looks again, to ask once the brake releases")
	ev := f.events()
	require.Len(t, ev, 1, "one Event when the brake engages, not one per node")
	assert.Contains(t, ev[0], "Warning NodeWarningBrake 2 of 3 nodes carrying managed pods warn at once (threshold 50%, at least 2)")
	assert.Equal(t, 1.0, testutil.ToFloat64(f.r.metrics.brakeEngaged))
	assert.Equal(t, 2.0, testutil.ToFloat64(f.r.metrics.skipped.WithLabelValues(SkipBrake)))

	// n2 clears: n1 alone warns (1 of 3), the brake releases and n1's job is asked.
	n2 := &corev1.Node{}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Name: "n2"}, n2))
	n2.Status.Conditions = node("n2").Status.Conditions
	require.NoError(t, f.c.Status().Update(context.Background(), n2))
	f.reconcile(t, "n2")
	assert.Equal(t, 0.0, testutil.ToFloat64(f.r.metrics.brakeEngaged), "the brake released")
	assert.Empty(t, f.trainers.asked(), "n2's own jobs are not asked: it no longer warns")
	f.reconcile(t, "n1")
	assert.Equal(t, []string{"10.0.1.1"}, f.trainers.asked())
}

func TestTaintsWarnWhenListed(t *testing.T) {
	n := node("n1")
	n.Spec.Taints = []corev1.Taint{{Key: "example.com/gpu-failing", Effect: corev1.TaintEffectNoSchedule}}
	f := newFixture(t, func(w *configv1alpha1.NodeWarningsConfig) { w.Taints = []string{"example.com/gpu-failing"} },
		n, node("n2"), rank("team", "llm", 0, "n1", "10.0.1.1"))
	f.trainers.commitAfter = 0
	f.reconcile(t, "n1")
	ev := f.events()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], "node n1 warns (taint example.com/gpu-failing): step 1200 committed")
}
