package webhook

import (
	"bytes"
	"context"
	corev1 "k8s.io/api/core/v1"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// crHandler serves the same admit function through controller-runtime's
// admission.Webhook (its body limit, content-type check, decoder and panic
// recovery) instead of reviewHandler, to weigh the two side by side.
func crHandler(admit admitFunc) http.Handler {
	return &admission.Webhook{Handler: admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		r := (&http.Request{}).WithContext(ctx)
		return admission.Response{AdmissionResponse: *admit(r, &req.AdmissionRequest)}
	})}
}

func benchPlumbing(b *testing.B, h http.Handler, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, PathMutatePod, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkPlumbing compares the handwritten HTTP side (reviewHandler) with
// controller-runtime's admission.Webhook around the same mutating admit
// function, on the benchmarks' realistic pod. docs/performance.md quotes it.
func BenchmarkPlumbing(b *testing.B) {
	s := testServer(b, logr.Discard())
	body := review(b, admissionv1.Create, podGVK(), "team-a", realisticPod(b, "team-a"), false)
	admit := s.mutate(corev1.SchemeGroupVersion.WithKind("Pod"))
	b.Run("handwritten", func(b *testing.B) {
		benchPlumbing(b, &reviewHandler{name: "mutate-pod", admit: admit, log: logr.Discard()}, body)
	})
	b.Run("controller-runtime", func(b *testing.B) { benchPlumbing(b, crHandler(admit), body) })
}
