//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// reschedulerArgs: none. Every scenario runs the rescheduler with its
// shipped defaults (--lease-lost-after=40s, --force-delete-after=40s), so the
// node-crash and partition figures are what a user gets (docs/e2e.md).
var reschedulerArgs []string

// values are the chart values of the e2e installs: the locally built image,
// the infra node, the claim the scenarios create, no GPU default (no GPUs here).
func values(certManager bool, extra string) string {
	args := ""
	if len(reschedulerArgs) > 0 {
		args = `"` + strings.Join(reschedulerArgs, `", "`) + `"`
	}
	return fmt.Sprintf(`image: {repository: localhost/trainguard, tag: e2e, pullPolicy: Never}
certManager: {enabled: %t}
nodeSelector: {%s: "true"}
tolerations: [{key: %s, operator: Exists, effect: NoSchedule}]
extraArgs: [%s]
config:
  checkpoint: {claim: %s, preStopTimeout: 30s}
  gpu: {defaultCount: 0}
  priorityBoost: {enabled: true}   # the cluster's Kueue runs with PriorityBoost
%s`, certManager, infraLabel, infraLabel, args, claimName, extra)
}

// helmInstall runs `helm upgrade --install` of charts/trainguard and waits
// until admission answers through the Service (a dry-run pod gets injected).
func (e *env) helmInstall(ctx context.Context, t *testing.T, certManager bool, extra string) time.Duration {
	t.Helper()
	f, err := os.CreateTemp("", "trainguard-e2e-values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(values(certManager, extra)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	start := time.Now()
	if out, err := e.helm(ctx, "upgrade", "--install", releaseName, "charts/trainguard", "-n", releaseNS,
		"--create-namespace", "--wait", "--timeout", "5m", "-f", f.Name()); err != nil {
		t.Fatalf("helm install: %v", err)
	} else {
		t.Logf("helm: %s", firstLine(out))
	}
	if err := e.waitAdmission(ctx, 3*time.Minute); err != nil {
		t.Fatalf("trainguard installed but admission does not inject: %v", err)
	}
	return time.Since(start)
}

func firstLine(s string) string { return strings.SplitN(strings.TrimSpace(s), "\n", 2)[0] }

// waitAdmission: a server-side dry-run pod in an opted-in namespace comes back
// injected, i.e. the API server reached trainguard through its Service with a
// CA bundle it trusts.
func (e *env) waitAdmission(ctx context.Context, timeout time.Duration) error {
	ns := "e2e-probe"
	_, _ = e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels:      map[string]string{"trainguard.io/inject": "enabled"},
		Annotations: map[string]string{"trainguard.io/inject": "enabled"}}}, metav1.CreateOptions{})
	var last string
	err := poll(ctx, 2*time.Second, timeout, func() (bool, error) {
		p, err := e.cs.CoreV1().Pods(ns).Create(ctx, pendingPod(ns, "probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = "not injected"
		return p.Annotations["trainguard.io/injected"] != "", nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, last)
	}
	return nil
}

// pendingPod is a training pod that is never scheduled (no node has the
// label), so creating many costs nothing but admission.
func pendingPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"e2e.trainguard.io/none": "true"},
			Containers:   []corev1.Container{{Name: "pytorch", Image: "localhost/pause:e2e", ImagePullPolicy: corev1.PullNever}},
		},
	}
}

var certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

// checkCertManager: cert-manager issued trainguard's serving certificate and
// cainjector put the CA into both webhook configurations.
func (e *env) checkCertManager(ctx context.Context) (string, error) {
	list, err := e.dyn.Resource(certificates).Namespace(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list Certificates: %w", err)
	}
	ready := 0
	for _, c := range list.Items {
		conds, _, _ := unstructuredSlice(c.Object, "status", "conditions")
		for _, cond := range conds {
			if cond["type"] == "Ready" && cond["status"] == "True" {
				ready++
			}
		}
	}
	if ready == 0 {
		return "", fmt.Errorf("no Ready Certificate in %s (%d found)", releaseNS, len(list.Items))
	}
	n, err := e.caBundles(ctx)
	return fmt.Sprintf("%d Certificate(s) Ready, CA injected into %d webhooks", ready, n), err
}

// caBundles counts trainguard's webhooks with a CA bundle; all must have one.
func (e *env) caBundles(ctx context.Context) (int, error) {
	m, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	v, err := e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, w := range m.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			return n, fmt.Errorf("mutating webhook %s has no caBundle", w.Name)
		}
		n++
	}
	for _, w := range v.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			return n, fmt.Errorf("validating webhook %s has no caBundle", w.Name)
		}
		n++
	}
	return n, nil
}

func unstructuredSlice(obj map[string]any, path ...string) ([]map[string]any, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	items, ok := cur.([]any)
	if !ok {
		return nil, false, nil
	}
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out, true, nil
}
