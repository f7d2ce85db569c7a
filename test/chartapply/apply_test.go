package chartapply

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// valueSet is one combination of values the chart tests render (see
// test/chart/chart_test.go), with what must come out of it.
type valueSet struct {
	name, release, namespace string
	set                      []string
	// certManager: the chart renders cert-manager objects.
	certManager bool
	// issuers is how many Issuers the chart renders (0 with issuerRef).
	issuers int
}

func valueSets() []valueSet {
	return []valueSet{
		{name: "defaults", release: "trainguard", namespace: "trainguard-system", certManager: true, issuers: 2},
		{name: "self-managed certificates", release: "trainguard", namespace: "trainguard-system",
			set: []string{"certManager.enabled=false"}},
		{name: "cluster-wide", release: "trainguard", namespace: "trainguard-system",
			set: []string{"clusterWide=true"}, certManager: true, issuers: 2},
		{name: "cluster-wide failing closed", release: "trainguard", namespace: "trainguard-system",
			set: []string{"clusterWide=true", "webhook.clusterWideFailurePolicy=Fail"}, certManager: true, issuers: 2},
		{name: "custom issuer", release: "trainguard", namespace: "trainguard-system",
			set: []string{"certManager.issuerRef.name=corp-ca", "certManager.issuerRef.kind=ClusterIssuer"}, certManager: true},
		{name: "custom namespace and release", release: "tg", namespace: "ml-platform",
			set: []string{"excludedNamespaces={monitoring,istio-system}", "webhook.failurePolicy=Ignore"}, certManager: true, issuers: 2},
		{name: "rescheduler disabled, self-managed", release: "trainguard", namespace: "trainguard-system",
			set: []string{"rescheduler.enabled=false", "certManager.enabled=false"}},
	}
}

// warningClient is a client whose Warning headers end up in the returned recorder.
func warningClient(t *testing.T) (client.Client, *controlplane.Warnings) {
	t.Helper()
	cfg, rec := controlplane.WithWarnings(apiServer.cfg)
	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	return c, rec
}

// renderChart renders the chart with the real helm for release in
// namespace, with set as --set values.
func renderChart(t *testing.T, release, namespace string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := chart.RenderShipped(release, namespace, set...)
	require.NoError(t, err)
	return objs
}

func ensureNamespace(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	err := apiServer.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err, "creating release namespace %s", name)
	}
}

func describe(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), ns, o.GetName())
	}
	return fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
}

func TestEveryRenderedManifestPassesServerSideDryRun(t *testing.T) {
	helm, err := chart.HelmBin()
	require.NoError(t, err, "the chart tests need the real helm binary")
	dir, err := chart.Dir()
	require.NoError(t, err)
	c, warned := warningClient(t)

	for _, vs := range valueSets() {
		t.Run(vs.name, func(t *testing.T) {
			ctx := context.Background()
			objs, err := chart.Render(helm, dir, vs.release, vs.namespace, vs.set...)
			require.NoError(t, err)
			require.NotEmpty(t, objs)
			ensureNamespace(t, ctx, vs.namespace)

			// The value set's cert-manager objects are really there, so the
			// CRDs installed in TestMain are what judges them.
			if vs.certManager {
				assert.NotEmpty(t, chart.OfKind(objs, "Certificate"), "cert-manager mode renders Certificates")
			} else {
				assert.Empty(t, chart.OfKind(objs, "Certificate"), "self-managed mode renders no Certificate")
			}
			assert.Len(t, chart.OfKind(objs, "Issuer"), vs.issuers)

			for _, obj := range objs {
				// Create, as `helm install` does, with unknown or duplicate
				// fields rejected rather than silently dropped.
				created := obj.DeepCopy()
				err := c.Create(ctx, created, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
				assert.NoError(t, err, "dry-run create of %s", describe(obj))
				assert.Empty(t, warned.Take(), "API server warnings on dry-run create of %s", describe(obj))

				// Server-side apply, as `helm upgrade --server-side` and
				// GitOps tools do: the merge needs a schema for every field.
				err = c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()),
					client.DryRunAll, client.FieldOwner("trainguard-chart-test"), client.ForceOwnership)
				assert.NoError(t, err, "dry-run server-side apply of %s", describe(obj))
				assert.Empty(t, warned.Take(), "API server warnings on dry-run apply of %s", describe(obj))
			}

			// Dry-run means nothing was stored (so each value set starts
			// from the same empty cluster and the names can repeat).
			for _, obj := range objs {
				probe := &unstructured.Unstructured{}
				probe.SetGroupVersionKind(obj.GroupVersionKind())
				err := apiServer.c.Get(ctx, client.ObjectKeyFromObject(obj), probe)
				assert.True(t, apierrors.IsNotFound(err), "%s must not exist after a dry run, got %v", describe(obj), err)
			}
		})
	}
}

// TestDryRunRejectsInvalidManifests proves the dry run judges what it is
// given: a broken Certificate (checked only by cert-manager's CRD schema)
// and an unknown field in a core object must both be refused.
func TestDryRunRejectsInvalidManifests(t *testing.T) {
	ctx := context.Background()
	objs := renderChart(t, "trainguard", "trainguard-system")
	ensureNamespace(t, ctx, "trainguard-system")

	serving, err := chart.Find(objs, "Certificate", "trainguard-serving-cert")
	require.NoError(t, err)
	badCert := serving.DeepCopy()
	require.NoError(t, unstructured.SetNestedField(badCert.Object, "not-a-duration-or-number", "spec", "privateKey", "size"))
	err = apiServer.c.Create(ctx, badCert, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
	require.Error(t, err, "cert-manager's schema must reject a string privateKey.size")
	assert.True(t, apierrors.IsInvalid(err) || apierrors.IsBadRequest(err), "got %v", err)

	deploy, err := chart.Find(objs, "Deployment", "trainguard")
	require.NoError(t, err)
	badDeploy := deploy.DeepCopy()
	require.NoError(t, unstructured.SetNestedField(badDeploy.Object, int64(1), "spec", "replicasTypo"))
	err = apiServer.c.Create(ctx, badDeploy, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
	require.Error(t, err, "strict field validation must reject an unknown field")
	assert.True(t, strings.Contains(err.Error(), "replicasTypo"), "got %v", err)

	// Warnings reach the recorder the main test asserts empty.
	c, warned := warningClient(t)
	deprecated := deploy.DeepCopy()
	require.NoError(t, unstructured.SetNestedStringMap(deprecated.Object,
		map[string]string{"beta.kubernetes.io/os": "linux"}, "spec", "template", "spec", "nodeSelector"))
	require.NoError(t, c.Create(ctx, deprecated, client.DryRunAll))
	assert.NotEmpty(t, warned.Take(), "a deprecated node label must draw a warning")
}
