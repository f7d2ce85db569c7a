package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainguard/trainguard/certs"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/webhook"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// chartMemoryLimit is the chart's default memory limit (values.yaml
// resources.limits.memory); the peak heap must stay under half of it.
const chartMemoryLimit = 256 << 20

// maxSizeReview is the largest review the API server can send: a pod of
// just under 3 MiB (the API server's request body limit, above etcd's
// 1.5 MiB default, so the legal maximum is lower still) as object and as
// oldObject, plus the envelope: about 6 MiB, under webhook.MaxRequestBytes. The
// pod is a training pod, so the full injection runs, and its bulk is env
// vars, the costliest shape to decode (one struct and two strings each).
func maxSizeReview(tb testing.TB) []byte {
	tb.Helper()
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: "team-a"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}}},
	}
	value := string(bytes.Repeat([]byte("x"), 80))
	for i := 0; ; i++ {
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "VAR_" + strconv.Itoa(i), Value: value})
		if i%1000 == 0 {
			if raw, _ := json.Marshal(&pod); len(raw) > 3*1024*1024-8*1024 {
				break
			}
		}
	}
	raw, err := json.Marshal(&pod)
	if err != nil {
		tb.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("7b1f4c1e-0000-4000-8000-00000000abcd"), Operation: admissionv1.Create, Namespace: "team-a", Name: "huge",
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object:   runtimeRaw(raw), OldObject: runtimeRaw(raw),
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	if len(body) > webhook.MaxRequestBytes || len(body) < 6*1024*1024-32*1024 {
		tb.Fatalf("the review should carry two objects of about 3 MiB, under the %d byte cap; it is %d bytes", webhook.MaxRequestBytes, len(body))
	}
	return body
}

// startServer runs the webhook endpoints behind the hardened server on a
// free loopback port with throwaway certificates.
func startServer(tb testing.TB, limits LimiterOptions) (string, func()) {
	tb.Helper()
	return startServerOpts(tb, WebhookServerOptions{Limits: limits, Log: logr.Discard()})
}

// startServerWith serves handlers behind the hardened server.
func startServerWith(tb testing.TB, limits LimiterOptions, handlers map[string]http.Handler) (string, func()) {
	tb.Helper()
	return startServerHandlers(tb, WebhookServerOptions{Limits: limits, Log: logr.Discard()}, handlers)
}

// startServerOpts serves trainguard's endpoints with opts.
func startServerOpts(tb testing.TB, opts WebhookServerOptions) (string, func()) {
	tb.Helper()
	_, url, stop := startServerObj(tb, opts, tb.TempDir())
	return url, stop
}

func startServerHandlers(tb testing.TB, opts WebhookServerOptions, handlers map[string]http.Handler) (string, func()) {
	tb.Helper()
	_, url, stop := startServerWithHandlers(tb, opts, tb.TempDir(), handlers)
	return url, stop
}

// startServerObj serves trainguard's endpoints with opts and certificates
// in dir, and returns the server too (its readiness check).
func startServerObj(tb testing.TB, opts WebhookServerOptions, dir string) (ctrlwebhook.Server, string, func()) {
	tb.Helper()
	optedIn := func(context.Context, string) (map[string]string, bool, error) {
		return map[string]string{contract.AnnotationInject: contract.InjectEnabled}, true, nil
	}
	s := webhook.NewServer(webhook.Options{Config: configv1alpha1.Default(), OwnNamespace: "trainguard-system"}, optedIn, nil, logr.Discard())
	return startServerWithHandlers(tb, opts, dir, s.Handlers())
}

func startServerWithHandlers(tb testing.TB, opts WebhookServerOptions, dir string, handlers map[string]http.Handler) (ctrlwebhook.Server, string, func()) {
	tb.Helper()
	if _, err := certs.EnsureDevCerts(dir, certs.Options{DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts.Host, opts.Port, opts.CertDir = "127.0.0.1", port, dir
	srv := NewWebhookServer(opts)
	for path, h := range handlers {
		srv.Register(path, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for srv.StartedChecker()(nil) != nil {
		if time.Now().After(deadline) {
			tb.Fatal("webhook server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return srv, fmt.Sprintf("https://127.0.0.1:%d", port), func() { cancel(); <-done }
}

// peakHeap samples the live heap until stop is closed.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// burstTimeLimit replaces every time limit of the server a burst is sent
// to (startBurstServer) and bounds the burst's client. The burst measures
// memory: the byte budget has the reviews decoded two at a time, so the
// last answer comes after all the others, which on a loaded 2-core runner
// took longer than the server's time limits. Past the write timeout (15 s,
// counted from the request's headers) the answer's write failed and the
// close_notify that followed was sealed under the next record number,
// which the client took for a forged record: "tls: bad record MAC". A
// body that waited for the receiving budget must then keep the lane's
// pace, which a starved client goroutine missed: 408. Neither is about
// memory, so neither limit applies to the burst.
const burstTimeLimit = 5 * time.Minute

// startBurstServer serves trainguard's endpoints with limits and no time
// limit a burst on a slow machine could reach.
func startBurstServer(tb testing.TB, limits LimiterOptions) (string, func()) {
	tb.Helper()
	limits.QueueWait, limits.BodyReadTimeout = burstTimeLimit, burstTimeLimit
	return startServerOpts(tb, WebhookServerOptions{
		ReadTimeout: burstTimeLimit, ReadHeaderTimeout: burstTimeLimit, WriteTimeout: burstTimeLimit,
		Limits: limits, Log: logr.Discard(),
	})
}

// burst sends n concurrent copies of body and counts the answers by status.
func burst(tb testing.TB, url string, body []byte, n int) (peak uint64, codes map[int]int) {
	tb.Helper()
	client := &http.Client{Timeout: burstTimeLimit, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: n, // throwaway cert
	}}
	defer client.CloseIdleConnections()
	runtime.GC()
	stop := make(chan struct{})
	peaks := peakHeap(stop)
	var mu sync.Mutex
	codes = map[int]int{}
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(url+webhook.PathMutatePod, "application/json", bytes.NewReader(body))
			if err != nil {
				failed.Store(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	tb.Logf("the last of %d answers came after %s", n, time.Since(start).Round(time.Millisecond))
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatalf("request failed: %v", err)
	}
	return <-peaks, codes
}

// BenchmarkConcurrentMaxSizeReviews sends 32 maximum-size reviews at once,
// with the default limits and, side by side, with the byte limit lifted
// (what controller-runtime's server does), and prints the peak heap.
func BenchmarkConcurrentMaxSizeReviews(b *testing.B) {
	body := maxSizeReview(b)
	for _, tc := range []struct {
		name   string
		limits LimiterOptions
	}{
		{"limited", LimiterOptions{}},
		{"unlimited", LimiterOptions{MaxConcurrent: 1024, MaxInFlightBytes: 1 << 40}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			url, stop := startBurstServer(b, tc.limits)
			defer stop()
			var peak uint64
			for i := 0; i < b.N; i++ {
				p, codes := burst(b, url, body, 32)
				peak = max(peak, p)
				if codes[http.StatusOK] != 32 {
					b.Fatalf("every review must be answered 200 (queued, not refused, within the wait): %v", codes)
				}
			}
			mib := float64(peak) / (1 << 20)
			b.ReportMetric(mib, "peak-heap-MiB")
			b.Logf("32 concurrent %.1f MiB reviews, %s: peak heap %.0f MiB (half the chart's memory limit: %d MiB)",
				float64(len(body))/(1<<20), tc.name, mib, chartMemoryLimit/2>>20)
		})
	}
}

// TestConcurrentMaxSizeReviewsStayUnderHalfTheMemoryLimit is the benchmark's
// acceptance check, run with the tests: memory, not time (no time limit
// applies to the burst), so a slow machine makes it slower, not red.
func TestConcurrentMaxSizeReviewsStayUnderHalfTheMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 32 x 7 MiB")
	}
	url, stop := startBurstServer(t, LimiterOptions{})
	defer stop()
	peak, codes := burst(t, url, maxSizeReview(t), 32)
	t.Logf("32 concurrent maximum-size reviews: peak heap %.0f MiB, answers %v", float64(peak)/(1<<20), codes)
	if codes[http.StatusOK] != 32 {
		t.Fatalf("every review must be answered 200: %v", codes)
	}
	if peak > chartMemoryLimit/2 {
		t.Fatalf("peak heap %d MiB exceeds half the chart's memory limit (%d MiB)", peak>>20, chartMemoryLimit/2>>20)
	}
}

func runtimeRaw(raw []byte) k8sruntime.RawExtension { return k8sruntime.RawExtension{Raw: raw} }
