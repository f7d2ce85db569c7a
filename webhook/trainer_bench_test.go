package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

// BenchmarkTrainerPodMutate is BenchmarkPodMutate's pod as a TrainJob's
// trainer pod (JobSet labels, container node): the difference between the
// two is what recognising a TrainJob pod costs (label checks, the TrainJob
// lookup, here a map, online an informer read, the policy merge).
// Run side by side: go test ./webhook -run '^$' -bench 'PodMutate$|TrainerPodMutate'.
func BenchmarkTrainerPodMutate(b *testing.B) {
	p := pod("team-a", "llm-node-0-0-abcde").Realistic()
	p.Labels = map[string]string{trainerv1alpha1.LabelJobSetName: "llm", trainerv1alpha1.LabelJobSetReplicatedJob: "node"}
	p.Spec.Containers[0].Name = "node"
	raw := p.JSON()
	tjs := &trainJobs{m: map[string]map[string]string{"team-a/llm": {}}}
	s := NewServer(Options{Config: configv1alpha1.Default(), OwnNamespace: "trainguard-system", TrainJobs: tjs.lookup}, namespaces(optedIn()), nil, logr.Discard())
	body := review(b, admissionv1.Create, podGVK(), "team-a", raw, false)
	h := s.Handlers()[PathMutatePod]
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tjs.asked = tjs.asked[:0]
		req := httptest.NewRequest(http.MethodPost, PathMutatePod, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"patch"`)) {
			b.Fatalf("not injected: %d %s", rec.Code, rec.Body.String())
		}
	}
}
