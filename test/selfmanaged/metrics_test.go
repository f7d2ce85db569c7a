package selfmanaged

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trainguard/trainguard/certs"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/server"
	"github.com/trainguard/trainguard/test/controlplane"
)

// TestMetricsNeedAuthenticationAndAuthorization runs a replica with the
// chart's metrics.secure=true wiring, as the chart's ServiceAccount (so the
// chart's metrics-auth RBAC is what lets it ask the API server), and reads
// /metrics over HTTPS: without a token, with a token the API server knows
// but has not authorized, and with one bound to the chart's
// metrics-reader ClusterRole.
func TestMetricsNeedAuthenticationAndAuthorization(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := controlplane.FreeAddr()
	require.NoError(t, err)
	hookAddr, err := controlplane.FreeAddr()
	require.NoError(t, err)
	var hookPort int
	_, err = fmt.Sscanf(hookAddr[strings.LastIndex(hookAddr, ":")+1:], "%d", &hookPort)
	require.NoError(t, err)

	asSA := rest.CopyConfig(env.cp.Config)
	asSA.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + controlplane.Namespace + ":" + serviceAccount}
	cfg := configv1alpha1.Default()
	*cfg.Rescheduler.Enabled = false
	mgr, err := server.New(ctx, asSA, server.Options{
		Config: cfg, CertDir: env.certDir, CertMode: server.CertModeFiles,
		WebhookHost: "127.0.0.1", WebhookPort: hookPort, MetricsAddr: addr, MetricsSecure: true, ProbeAddr: "0",
		Namespace: controlplane.Namespace, SeveralInProcess: true,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	scraper, stranger := tokenFor(t, "scraper", true), tokenFor(t, "stranger", false)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: certPool(t, getSecret(t).Data[certs.CAFile]), MinVersion: tls.VersionTLS12,
	}}}
	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	require.Eventually(t, func() bool { code, _ := get(""); return code != 0 }, 20*time.Second, 100*time.Millisecond,
		"metrics must be served over HTTPS with a certificate the self-managed CA signed")

	code, _ := get("")
	assert.Equal(t, http.StatusUnauthorized, code, "no token: not authenticated")
	code, _ = get(stranger)
	assert.Equal(t, http.StatusForbidden, code, "a valid token without the metrics-reader role")
	code, body := get(scraper)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "trainguard_webhook_inflight_requests", "trainguard's own metrics are exported")

	// Plain HTTP is not served on the port.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err == nil {
		defer resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP must get Go's 'client sent an HTTP request to an HTTPS server'")
	}
}

// tokenFor creates a ServiceAccount and a token for it; bound, it is given
// the chart's metrics-reader ClusterRole.
func tokenFor(t *testing.T, name string, bound bool) string {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.cp.Config)
	require.NoError(t, err)
	ns := "metrics-scrapers"
	_, _ = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	if bound {
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "trainguard-metrics-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: controlplane.ReleaseName + "-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}
