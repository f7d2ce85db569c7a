package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/trainguard/trainguard/webhook"
)

// trainingPodReview is a CREATE review of an ordinary training pod.
func trainingPodReview(tb testing.TB) []byte {
	tb.Helper()
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "w0", Namespace: "team-a", Labels: map[string]string{"app": "trainer"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}}},
	}
	raw, err := json.Marshal(&pod)
	if err != nil {
		tb.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("7b1f4c1e-0000-4000-8000-00000000abcd"), Operation: admissionv1.Create, Namespace: "team-a", Name: "w0",
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object: runtimeRaw(raw),
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkRoundTrip times a review over real TLS and HTTP/1.1 keep-alive,
// from 8 concurrent clients, to trainguard's pod mutator and to a no-op
// controller-runtime admission.Webhook behind the same server: the
// transport and server cost of a call, without an API server.
func BenchmarkRoundTrip(b *testing.B) {
	body := trainingPodReview(b)
	url, stop := startServer(b, LimiterOptions{})
	defer stop()
	noop := &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})}
	noopURL, stopNoop := startHandler(b, noop)
	defer stopNoop()
	for _, tc := range []struct{ name, url string }{{"trainguard-mutate-pod", url + webhook.PathMutatePod}, {"noop", noopURL}} {
		b.Run(tc.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 25, // throwaway cert
			}}
			defer client.CloseIdleConnections()
			b.SetParallelism(4) // 8 goroutines on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(tc.url, "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// startHandler serves h at /noop behind the hardened server.
func startHandler(tb testing.TB, h http.Handler) (string, func()) {
	tb.Helper()
	url, stop := startServerWith(tb, LimiterOptions{}, map[string]http.Handler{"/noop": h})
	return url + "/noop", stop
}
