package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

// durableServer is a test server whose namespaces are: team-a (opted in,
// no claim), team-ckp (a claim) and strict (durable checkpoints required).
func durableServer(t *testing.T) (*Server, *events.FakeRecorder, *prometheus.Registry) {
	t.Helper()
	ns := optedIn()
	ns["strict"] = map[string]string{contract.AnnotationInject: contract.InjectEnabled, contract.AnnotationRequireDurableCheckpoints: "true"}
	s := testServer(t, logr.Discard())
	s.scope.Namespaces, s.injector.Namespaces = namespaces(ns), namespaces(ns)
	rec := events.NewFakeRecorder(64)
	reg := prometheus.NewRegistry()
	var err error
	s.durable, err = newDurableReporter(reg, rec)
	require.NoError(t, err)
	return s, rec, reg
}

func jobReview(t *testing.T, ns string, dryRun bool) []byte {
	t.Helper()
	return jobReviewOf(t, ns, dryRun, builders.MakeKubeflowJob(ns, "train"))
}

func jobReviewOf(t *testing.T, ns string, dryRun bool, job *builders.KubeflowJobWrapper) []byte {
	t.Helper()
	raw, err := json.Marshal(job.Obj())
	require.NoError(t, err)
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
			Operation: admissionv1.Create, Namespace: ns, Name: "train", Object: runtime.RawExtension{Raw: raw}, DryRun: &dryRun},
	}
	body, err := json.Marshal(&ar)
	require.NoError(t, err)
	return body
}

// TestEphemeralCheckpointsWarnEventAndMetric: a job without a claim is
// admitted with a warning per template, an Event on the job and a count;
// with a claim nothing; in a namespace that requires durable checkpoints
// it is refused (and counted as refused); a dry run leaves no Event.
func TestEphemeralCheckpointsWarnEventAndMetric(t *testing.T) {
	s, rec, reg := durableServer(t)
	post := func(ns string, dryRun bool) *admissionv1.AdmissionResponse {
		rr, out := post(t, s, PathValidateKubeflowJob, bytes.NewReader(jobReview(t, ns, dryRun)), -1)
		require.Equal(t, http.StatusOK, rr.Code)
		return out.Response
	}
	resp := post("team-a", false)
	assert.True(t, resp.Allowed)
	require.Len(t, resp.Warnings, 2, "one per template: %v", resp.Warnings)
	assert.Contains(t, resp.Warnings[0], "checkpoints are not durable: /checkpoint is on the container's own filesystem")
	require.Len(t, rec.Events, 1)
	ev := <-rec.Events
	assert.True(t, strings.HasPrefix(ev, "Warning EphemeralCheckpoints PyTorchJob team-a/train: 2 pod template(s) checkpoint to storage that is deleted with the pod"), ev)
	assert.Equal(t, 1.0, testutil.ToFloat64(s.durable.objects.WithLabelValues("team-a", "PyTorchJob", "warned")))

	resp = post("team-ckp", false)
	assert.True(t, resp.Allowed)
	assert.Empty(t, resp.Warnings)
	assert.Empty(t, rec.Events)

	resp = post("strict", false)
	assert.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "trainguard.io/require-durable-checkpoints=true")
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "Warning EphemeralCheckpointsRefused PyTorchJob strict/train")
	assert.Equal(t, 1.0, testutil.ToFloat64(s.durable.objects.WithLabelValues("strict", "PyTorchJob", "refused")))

	post("team-a", true)
	assert.Empty(t, rec.Events, "a dry run records nothing")
	n, err := testutil.GatherAndCount(reg, "trainguard_ephemeral_checkpoint_objects_total")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

// TestEphemeralCheckpointsAreNotReadFromMessages: a warning that quotes a
// tenant's annotation is not taken for an ephemeral-checkpoint verdict,
// however the tenant words it. When the webhook searched the warnings for
// ": checkpoints are not durable:", this job, whose checkpoints are on the
// namespace's claim, got an EphemeralCheckpoints Event and was counted.
func TestEphemeralCheckpointsAreNotReadFromMessages(t *testing.T) {
	s, rec, reg := durableServer(t)
	forged := builders.MakeKubeflowJob("team-ckp", "train").WithAnnotation("recover-strategy", "elastic-training,x: checkpoints are not durable: forged")
	rr, out := post(t, s, PathValidateKubeflowJob, bytes.NewReader(jobReviewOf(t, "team-ckp", false, forged)), -1)
	require.Equal(t, http.StatusOK, rr.Code)
	require.NotEmpty(t, out.Response.Warnings, "the quoting warning is answered")
	assert.Contains(t, strings.Join(out.Response.Warnings, "\n"), ": checkpoints are not durable: forged")
	assert.Empty(t, rec.Events)
	n, err := testutil.GatherAndCount(reg, "trainguard_ephemeral_checkpoint_objects_total")
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestEphemeralCheckpointEventsFoldPerNamespace: 20 jobs admitted at once
// in a namespace without a claim get 20 warnings and 20 counts but one
// Event; the next Event, an interval later, names the objects it stands
// for (the 19 held back and itself); a refusal in another namespace has
// its own Event. With an Event per object (an API write per admission,
// what kept trainguard at 0.83x of the patching no-op under make load)
// the recorder would hold 21 Events here.
func TestEphemeralCheckpointEventsFoldPerNamespace(t *testing.T) {
	s, rec, _ := durableServer(t)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	s.durable.fold.now = func() time.Time { return now }
	const n = 20
	codes, body := make([]int, n), jobReview(t, "team-a", false)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rr := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, PathValidateKubeflowJob, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			s.Handlers()[PathValidateKubeflowJob].ServeHTTP(rr, req)
			codes[i] = rr.Code
		})
	}
	wg.Wait()
	for _, c := range codes {
		require.Equal(t, http.StatusOK, c)
	}
	assert.Equal(t, float64(n), testutil.ToFloat64(s.durable.objects.WithLabelValues("team-a", "PyTorchJob", "warned")))
	require.Len(t, rec.Events, 1, "one Event for the namespace")
	assert.Contains(t, <-rec.Events, "(1 such object(s) in namespace team-a since the last such Event, this one included: one Event per namespace every 1m0s)")

	rr, out := post(t, s, PathValidateKubeflowJob, bytes.NewReader(jobReview(t, "strict", false)), -1)
	require.Equal(t, http.StatusOK, rr.Code)
	assert.False(t, out.Response.Allowed)
	require.Len(t, rec.Events, 1, "a refusal in another namespace is not held back")
	assert.Contains(t, <-rec.Events, "Warning EphemeralCheckpointsRefused PyTorchJob strict/train")

	now = now.Add(ephemeralEventInterval)
	post(t, s, PathValidateKubeflowJob, bytes.NewReader(body), -1)
	require.Len(t, rec.Events, 1)
	ev := <-rec.Events
	assert.True(t, strings.HasPrefix(ev, "Warning EphemeralCheckpoints PyTorchJob team-a/train: 2 pod template(s)"), ev)
	assert.Contains(t, ev, "(20 such object(s) in namespace team-a since the last such Event, this one included")
}

// TestEventFoldStaysBounded: past maxFoldWindows namespaces the expired
// windows are dropped, and while all are open an object gets its Event
// rather than a new window.
func TestEventFoldStaysBounded(t *testing.T) {
	f := newEventFold(time.Minute)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	f.now = func() time.Time { return now }
	for i := range maxFoldWindows {
		emit, _ := f.admit(strconv.Itoa(i), ReasonEphemeralCheckpoints)
		require.True(t, emit)
	}
	emit, objects := f.admit("one-more", ReasonEphemeralCheckpoints)
	assert.True(t, emit)
	assert.Equal(t, 1, objects)
	assert.Len(t, f.windows, maxFoldWindows, "no window past the bound")

	now = now.Add(time.Minute)
	emit, _ = f.admit("one-more", ReasonEphemeralCheckpoints)
	assert.True(t, emit)
	assert.Len(t, f.windows, 1, "the expired windows were dropped")
	emit, _ = f.admit("one-more", ReasonEphemeralCheckpoints)
	assert.False(t, emit, "its window is open")
}
