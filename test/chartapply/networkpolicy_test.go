package chartapply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/test/chart"
)

// TestNetworkPolicyWithPeersPassesServerSideDryRun: every kind of peer the
// values accept (namespaceSelector, podSelector, ipBlock) renders a
// NetworkPolicy the real API server accepts, and the ports it opens are the
// named container ports of the rendered Deployment.
func TestNetworkPolicyWithPeersPassesServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	ensureNamespace(t, ctx, "trainguard-system")
	objs := renderChart(t, "trainguard", "trainguard-system",
		"networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
		"networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus",
		"networkPolicy.probesFrom[0].ipBlock.cidr=10.0.0.0/8",
		"networkPolicy.probesFrom[0].ipBlock.except[0]=10.1.0.0/16",
		"networkPolicy.webhookFrom[0].ipBlock.cidr=192.168.0.0/16")
	o, err := chart.Find(objs, "NetworkPolicy", "trainguard")
	require.NoError(t, err)
	c, warned := warningClient(t)
	require.NoError(t, c.Create(ctx, o.DeepCopy(), client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict)))
	assert.Empty(t, warned.Take())

	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, chart.Into(o, np))
	require.Len(t, np.Spec.Ingress, 3)
	ports := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		require.Len(t, rule.Ports, 1)
		ports[rule.Ports[0].Port.String()] = rule.From
	}
	assert.Equal(t, "192.168.0.0/16", ports["webhook"][0].IPBlock.CIDR)
	assert.Equal(t, "monitoring", ports["metrics"][0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
	assert.Equal(t, "prometheus", ports["metrics"][0].PodSelector.MatchLabels["app"])
	assert.Equal(t, []string{"10.1.0.0/16"}, ports["health"][0].IPBlock.Except)
}

// TestNetworkPolicyRejectsABadPeer: the dry run judges the peers, so a CIDR
// typo fails the install instead of silently opening or closing a port.
func TestNetworkPolicyRejectsABadPeer(t *testing.T) {
	ctx := context.Background()
	ensureNamespace(t, ctx, "trainguard-system")
	objs := renderChart(t, "trainguard", "trainguard-system", "networkPolicy.metricsFrom[0].ipBlock.cidr=10.0.0.0/33")
	o, err := chart.Find(objs, "NetworkPolicy", "trainguard")
	require.NoError(t, err)
	err = apiServer.c.Create(ctx, o.DeepCopy(), client.DryRunAll)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cidr")
}

// TestPodMatchConditionsPassServerSideDryRun: the optional pod CREATE
// matchConditions compile in the real API server's CEL environment.
func TestPodMatchConditionsPassServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	objs := renderChart(t, "trainguard", "trainguard-system", "webhook.podMatchConditions=true")
	c, warned := warningClient(t)
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		o, err := chart.Find(objs, kind, "trainguard")
		require.NoError(t, err)
		require.NoError(t, c.Create(ctx, o.DeepCopy(), client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict)), kind)
		assert.Empty(t, warned.Take())
	}
}
