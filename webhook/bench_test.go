package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/jobs"
)

// benchHandler drives the full HTTP handler (decode, mutate, patch, encode).
func benchHandler(b *testing.B, path string, body []byte) {
	s := testServer(b, logr.Discard())
	h := s.Handlers()[path]
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	}
}

func BenchmarkPodMutate(b *testing.B) {
	raw := realisticPod(b, "team-a")
	benchHandler(b, PathMutatePod, review(b, admissionv1.Create, podGVK(), "team-a", raw, false))
}

func BenchmarkPodNotOptedIn(b *testing.B) {
	raw := realisticPod(b, "other")
	benchHandler(b, PathMutatePod, review(b, admissionv1.Create, podGVK(), "other", raw, false))
}

func BenchmarkPyTorchJobMutate(b *testing.B) {
	in, err := yaml.YAMLToJSON(mustReadT(b, "testdata/master-worker.in.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	gvk := metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}
	benchHandler(b, PathMutateKubeflowJob, review(b, admissionv1.Create, gvk, "team-a", in, false))
}

// BenchmarkInjectorPod isolates trainguard's own work from HTTP and JSON envelope handling.
func BenchmarkInjectorPod(b *testing.B) {
	raw := realisticPod(b, "team-a")
	s, gvk := testServer(b, logr.Discard()), jobs.Pod().GVK
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := s.injector.Inject(context.Background(), Request{GVK: gvk, Namespace: "team-a", Raw: raw}); err != nil {
			b.Fatal(err)
		}
	}
}

// realisticPod is the benchmarks' pod: about 8 KB of JSON, like a training
// pod with its env, mounts and probes.
func realisticPod(b *testing.B, ns string) []byte {
	raw := pod(ns, "resnet-worker-0").Realistic().JSON()
	if len(raw) < 7800 || len(raw) > 8800 {
		b.Fatalf("the benchmark pod should be about 8 KB, is %d bytes", len(raw))
	}
	return raw
}
