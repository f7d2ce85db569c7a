package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainguard/trainguard/certs"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// sidecarWebhook is a second mutating webhook that adds a container to
// every pod it sees, so the API server reinvokes trainguard.
func sidecarWebhook(t *testing.T) (url string, caBundle []byte) {
	t.Helper()
	bundle, err := certs.Generate(certs.Options{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(bundle.ServerCert, bundle.ServerKey)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var pod corev1.Pod
		_ = json.Unmarshal(review.Request.Object.Raw, &pod)
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		has := false
		for _, c := range pod.Spec.Containers {
			has = has || c.Name == "log-shipper"
		}
		if !has {
			patch := `[{"op":"add","path":"/spec/containers/-","value":{"name":"log-shipper","image":"example.com/fluent-bit:2"}}]`
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = []byte(patch), &pt
		}
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(&review)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String() + "/mutate", bundle.CACert
}

func mutatePodCalls(t *testing.T) float64 {
	t.Helper()
	return mutatePodDecisions(t, "")
}

// mutatePodDecisions counts the pod webhook's answers with decision
// ("patched", "allowed", ...; "" counts all).
func mutatePodDecisions(t *testing.T, decision string) float64 {
	t.Helper()
	if decision == "" {
		return counterSum(t, "trainguard_admission_decisions_total", "webhook", "mutate-pod")
	}
	return counterSum(t, "trainguard_admission_decisions_total", "webhook", "mutate-pod", "decision", decision)
}

// counterSum adds up the series of trainguard's counter name (it runs in
// this process) whose labels have the values labels gives, in name, value
// pairs.
func counterSum(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] }) {
			return false
		}
	}
	return true
}

func TestReinvocationInjectsExactlyOnce(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, nil)
	url, ca := sidecarWebhook(t)
	none := admissionregistrationv1.SideEffectClassNone
	ifNeeded := admissionregistrationv1.IfNeededReinvocationPolicy
	fail := admissionregistrationv1.Fail
	sidecar := &admissionregistrationv1.MutatingWebhookConfiguration{
		// Named to sort after "trainguard", so it runs second and trainguard is reinvoked.
		ObjectMeta: metav1.ObjectMeta{Name: "zzz-sidecar-injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "sidecar.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &ifNeeded,
			FailurePolicy:           &fail,
		}},
	}
	require.NoError(t, env.c.Create(ctx, sidecar))
	t.Cleanup(func() { _ = env.c.Delete(ctx, sidecar) })
	require.Equal(t, admissionregistrationv1.IfNeededReinvocationPolicy, *podWebhook(t).ReinvocationPolicy, "the chart ships IfNeeded")

	before := mutatePodCalls(t)
	p := newPod(ns, "reinvoked").Obj()
	require.Eventually(t, func() bool { return env.c.Create(ctx, p) == nil }, 10e9, 2e8, "the sidecar webhook configuration becomes active")
	calls := mutatePodCalls(t) - before
	assert.GreaterOrEqual(t, calls, 2.0, "trainguard was reinvoked after the sidecar was added")

	var got corev1.Pod
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(p), &got))
	require.Len(t, got.Spec.Containers, 2)
	assert.Equal(t, "log-shipper", got.Spec.Containers[1].Name)
	assert.Len(t, got.Spec.InitContainers, 1, "one agent installer")
	var portNames []string
	for _, port := range got.Spec.Containers[0].Ports {
		portNames = append(portNames, port.Name)
	}
	assert.Equal(t, []string{"taskd-port", "ttp-port"}, portNames, "one TaskD port, one MindIO TTP port")
	assert.Len(t, got.Spec.Volumes, 1, "one agent volume")
	assert.Equal(t, "prestop,taskd,recover-strategy,restart-rules", got.Annotations[contract.AnnotationInjected])
	assert.Nil(t, got.Spec.Containers[1].Lifecycle, "the sidecar is not a training container")
	envNames := map[string]int{}
	for _, e := range got.Spec.Containers[0].Env {
		envNames[e.Name]++
	}
	for name, n := range envNames {
		assert.Equal(t, 1, n, "env %s injected once", name)
	}
}

func podWebhook(t *testing.T) admissionregistrationv1.MutatingWebhook {
	t.Helper()
	for _, w := range env.cp.Mutating.Webhooks {
		if w.Name == "pods.mutate.trainguard.io" {
			return w
		}
	}
	t.Fatal("the chart has no pods.mutate.trainguard.io webhook")
	return admissionregistrationv1.MutatingWebhook{}
}
