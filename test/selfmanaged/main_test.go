// Package selfmanaged runs trainguard in self-managed certificate mode
// against a real kube-apiserver: the webhook configurations come from the
// chart rendered with certManager.enabled=false, trainguard creates its CA
// and serving certificate in a Secret, replaces the CA bundle envtest put
// into the configurations with its own, serves admission through it and
// rotates it under load.
package selfmanaged

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/certs"
	"github.com/trainguard/trainguard/internal/server"
	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// Names the chart gives release "trainguard" (see charts/trainguard/templates/_helpers.tpl).
const (
	secretName     = controlplane.ReleaseName + "-tls"
	serviceName    = controlplane.ReleaseName
	configName     = controlplane.ReleaseName
	serviceAccount = controlplane.ReleaseName
)

// selfManagedValues render the chart for self-managed certificates.
var selfManagedValues = []string{"certManager.enabled=false"}

// env is the fixture TestMain builds and every test shares.
var env struct { // TestMain's fixture.
	cp *controlplane.ControlPlane
	tg *controlplane.Trainguard
	c  client.Client
	// sm is a second replica's SelfManaged, on the same Secret, cert dir and
	// configurations as the one server.New runs inside trainguard. The test
	// drives rotations through it. It runs as the chart's ServiceAccount,
	// so the chart's RBAC is what it gets, and its certificate also covers
	// 127.0.0.1: envtest registers the webhooks by URL on that address,
	// and server.Options has no field for extra SANs.
	sm *certs.SelfManaged
	// asSA is sm's client, impersonating the chart's ServiceAccount.
	asSA    client.Client
	certDir string
	// envtestCA is the CA bundle envtest injected when installing the
	// configurations; trainguard must replace it with its own.
	envtestCA []byte
	addr      string
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(controlplane.RunSuite("selfmanaged suite", m, run))
}

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	cp, err := controlplane.Start(controlplane.Options{ChartValues: selfManagedValues})
	if err != nil {
		return 1, err
	}
	defer func() { _ = cp.Stop() }()
	env.cp, env.c = cp, cp.Client
	wio := cp.Env.WebhookInstallOptions
	env.envtestCA = wio.LocalServingCAData
	env.addr = net.JoinHostPort(wio.LocalServingHost, fmt.Sprint(wio.LocalServingPort))

	if err := installReleaseNamespaceAndRBAC(ctx); err != nil {
		return 1, err
	}
	if env.certDir, err = os.MkdirTemp("", "trainguard-selfmanaged-certs-"); err != nil {
		return 1, err
	}
	defer os.RemoveAll(env.certDir)
	if env.certDir == wio.LocalServingCertDir {
		return 1, fmt.Errorf("cert dir %s is envtest's", env.certDir)
	}

	asSA := rest.CopyConfig(cp.Config)
	asSA.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + controlplane.Namespace + ":" + serviceAccount}
	saClient, err := client.New(asSA, client.Options{})
	if err != nil {
		return 1, err
	}
	env.asSA = saClient
	if err := waitFence(ctx, saClient); err != nil {
		return 1, err
	}
	env.sm = certs.NewSelfManaged(saClient, certs.SelfManagedOptions{
		Namespace: controlplane.Namespace, SecretName: secretName, ServiceName: serviceName,
		WebhookConfigName: configName, CertDir: env.certDir,
		IPAddresses: []net.IP{net.ParseIP(wio.LocalServingHost)},
	})
	// Creates the Secret and the files; it injects nothing (Prepare never
	// does), so the bundle the tests find was put there by trainguard.
	prepareCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := env.sm.Prepare(prepareCtx); err != nil {
		return 1, err
	}

	tg, err := cp.StartTrainguard(ctx, controlplane.TrainguardOptions{
		CertMode: server.CertModeSelfManaged, CertDir: env.certDir, CertSecret: secretName,
	})
	if err != nil {
		return 1, err
	}
	env.tg = tg
	code := m.Run()
	if err := tg.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping trainguard:", err)
		code = 1
	}
	return code, nil
}

// installReleaseNamespaceAndRBAC creates the release namespace and, for
// real, the ServiceAccount, RBAC and ValidatingAdmissionPolicy the chart
// renders in self-managed mode: the rotations below run under both fences
// (issue 31, item 1: the policy lets the account change only the CA bundle
// of the webhook configurations).
func installReleaseNamespaceAndRBAC(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controlplane.Namespace}}
	if err := env.c.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", controlplane.Namespace, err)
	}
	objs, err := chart.RenderShipped(controlplane.ReleaseName, controlplane.Namespace, selfManagedValues...)
	if err != nil {
		return err
	}
	rbac := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	// Every kind at least once (metrics.secure adds its own ClusterRoles and binding).
	kinds := map[string]bool{}
	for _, o := range objs {
		if !slices.Contains(rbac, o.GetKind()) {
			continue
		}
		if err := env.c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		kinds[o.GetKind()] = true
	}
	if len(kinds) != len(rbac) {
		return fmt.Errorf("chart rendered RBAC kinds %v, want all of %v", kinds, rbac)
	}
	return nil
}

// fencePolicy is the chart's ValidatingAdmissionPolicy for the release.
const fencePolicy = controlplane.ReleaseName + "-fence"

// waitFence waits until the API server enforces the policy on the webhook
// configurations (it compiles policies asynchronously): a dry-run update of
// the mutating configuration's failurePolicy, as sa, is refused by it.
func waitFence(ctx context.Context, sa client.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fenceProbe(ctx, sa)
		if err != nil && strings.Contains(err.Error(), fencePolicy) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the policy %s is not enforced after 30s (last answer: %v)", fencePolicy, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fenceProbe dry-runs, as sa, an update of the mutating configuration that
// changes a webhook's failurePolicy: what a stolen token would do.
func fenceProbe(ctx context.Context, sa client.Client) error {
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.c.Get(ctx, types.NamespacedName{Name: configName}, m); err != nil {
		return err
	}
	ignore := admissionregistrationv1.Ignore
	if m.Webhooks[0].FailurePolicy != nil && *m.Webhooks[0].FailurePolicy == ignore {
		ignore = admissionregistrationv1.Fail
	}
	m.Webhooks[0].FailurePolicy = &ignore
	return sa.Update(ctx, m, client.DryRunAll)
}
