package scale

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/testing/builders"
	"github.com/trainguard/trainguard/test/controlplane"
)

// AdmissionReport is pod creation latency in bursts of 64 (one job's pods
// arriving together), through trainguard and through a no-op webhook
// registered like trainguard's, interleaved in the same run.
type AdmissionReport struct {
	Bursts                       int
	TrainguardP50, TrainguardP99 float64 // milliseconds
	NoopP50, NoopP99             float64
	P99Ratio                     float64
	// Reviews trainguard answered during the bursts, and its mean time per
	// review from the request's headers to its answer (body, queueing,
	// decision, encoding: trainguard_webhook_request_duration_seconds),
	// which says how much of the gap to the no-op is trainguard's own.
	Reviews     float64
	ServeMeanMs float64
	// Connections the API server opened to trainguard during the bursts
	// (each a TLS handshake; keep-alive reuses them).
	Connections float64
}

const noopLabel = "scale.trainguard.io/noop"

// startNoop serves an always-allow webhook with envtest's certificate and
// registers copies of trainguard's pod entries (rules, failure policy,
// timeouts) pointing at it, for namespaces labelled noopLabel.
func (e *env) startNoop(ctx context.Context) error {
	port, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	// HTTP/1.1 only, as trainguard (and any webhook hardened against HTTP/2
	// rapid reset, CVE-2023-44487): with HTTP/2 the API server would
	// multiplex a burst over one connection here and open one per
	// concurrent review to trainguard, and the ratio would measure the
	// protocol, not the webhook.
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: e.cp.Env.WebhookInstallOptions.LocalServingCertDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}})
	srv.Register("/noop", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})})
	go func() { _ = srv.Start(ctx) }()
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) { return srv.StartedChecker()(&http.Request{}) == nil, nil }); err != nil {
		return fmt.Errorf("no-op webhook server: %w", err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/noop", port)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{noopLabel: "true"}}
	pods := func(rules []admissionregistrationv1.RuleWithOperations) bool {
		for _, r := range rules {
			if slices.Contains(r.Resources, "pods") {
				return true
			}
		}
		return false
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "noop-scale"}}
	for _, w := range e.cp.Mutating.DeepCopy().Webhooks {
		if pods(w.Rules) {
			w.Name, w.ClientConfig.URL, w.NamespaceSelector, w.MatchConditions = "noop-"+w.Name, &url, sel, nil
			m.Webhooks = append(m.Webhooks, w)
		}
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "noop-scale"}}
	for _, w := range e.cp.Validating.DeepCopy().Webhooks {
		if pods(w.Rules) {
			w.Name, w.ClientConfig.URL, w.NamespaceSelector, w.MatchConditions = "noop-"+w.Name, &url, sel, nil
			v.Webhooks = append(v.Webhooks, w)
		}
	}
	if err := e.c.Create(ctx, m); err != nil {
		return err
	}
	return e.c.Create(ctx, v)
}

func (e *env) admission(ctx context.Context) (*AdmissionReport, error) {
	if err := e.startNoop(ctx); err != nil {
		return nil, err
	}
	tgNS, noopNS := "burst-trainguard", "burst-noop"
	if err := e.c.Create(ctx, optedIn(tgNS)); err != nil {
		return nil, err
	}
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: noopNS, Labels: map[string]string{noopLabel: "true"}}}); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		ns := &corev1.Namespace{}
		err := e.c.Get(ctx, client.ObjectKey{Name: tgNS}, ns)
		return err == nil && len(ns.Labels) > 1, nil
	}); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // the API server picks the no-op's configuration up
	lat := map[string][]float64{}
	var before series
	for b := -1; b < e.o.Bursts; b++ { // burst -1 warms both paths up
		order := []string{tgNS, noopNS}
		if b%2 == 1 {
			order = []string{noopNS, tgNS}
		}
		if b == 0 {
			var err error
			if before, err = e.scrape(ctx); err != nil {
				return nil, err
			}
		}
		for _, ns := range order {
			l, err := e.burst(ctx, ns, fmt.Sprintf("b%d", b+1))
			if err != nil {
				return nil, err
			}
			if b >= 0 {
				lat[ns] = append(lat[ns], l...)
			}
		}
	}
	r := &AdmissionReport{Bursts: e.o.Bursts,
		TrainguardP50: quantile(lat[tgNS], 0.5), TrainguardP99: quantile(lat[tgNS], 0.99),
		NoopP50: quantile(lat[noopNS], 0.5), NoopP99: quantile(lat[noopNS], 0.99)}
	r.P99Ratio = r.TrainguardP99 / r.NoopP99
	after, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	const served = "trainguard_webhook_request_duration_seconds"
	r.Reviews = after.sum(served+"_count") - before.sum(served+"_count")
	r.Connections = after.sum("trainguard_webhook_connections_total") - before.sum("trainguard_webhook_connections_total")
	if r.Reviews > 0 {
		r.ServeMeanMs = 1000 * (after.sum(served+"_sum") - before.sum(served+"_sum")) / r.Reviews
	}
	fmt.Fprintf(e.out, "  admission, %d bursts of 64 pods created at once: trainguard p50 %.1f ms p99 %.1f ms; no-op webhook p50 %.1f ms p99 %.1f ms; p99 ratio %.2fx (target <= 1.3)\n",
		r.Bursts, r.TrainguardP50, r.TrainguardP99, r.NoopP50, r.NoopP99, r.P99Ratio)
	fmt.Fprintf(e.out, "  trainguard answered %.0f reviews in those bursts (%.1f per pod), %.1f ms each on average from headers to answer, on %.0f new connections\n",
		r.Reviews, r.Reviews/float64(64*r.Bursts), r.ServeMeanMs, r.Connections)
	// Unscheduled, the burst pods cost the rescheduler nothing; removing
	// them is tidiness, and an API server too busy to do it fails nothing.
	for _, ns := range []string{tgNS, noopNS} {
		if err := e.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns)); err != nil {
			fmt.Fprintf(e.out, "  (the burst pods of %s stay: %v)\n", ns, err)
		}
	}
	return r, nil
}

// burst creates one job's 64 pods at once, unscheduled, and returns each
// create's latency in milliseconds.
func (e *env) burst(ctx context.Context, ns, prefix string) ([]float64, error) {
	out := make([]float64, 64)
	errs := make([]error, 64)
	var wg sync.WaitGroup
	job := strings.ReplaceAll(prefix, "b", "burst-")
	for i := range 64 {
		wg.Go(func() {
			// A bare pod with the training pods' spec, unscheduled: only
			// admission is measured. (The job template's injection would
			// make trainguard's pod webhook a pass-through.)
			p := builders.MakePod(ns, fmt.Sprintf("%s-%d", job, i)).WithLabel(kubeflowv1.LabelJobName, job).
				WithRestartPolicy(corev1.RestartPolicyNever).Realistic().Obj()
			t := time.Now()
			errs[i] = e.c.Create(ctx, p)
			out[i] = float64(time.Since(t).Microseconds()) / 1000
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("burst in %s: %w", ns, err)
		}
	}
	return out, nil
}
