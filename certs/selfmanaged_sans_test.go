package certs

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func withExtraSANs(s *SelfManaged) *SelfManaged {
	s.opts.ExtraDNSNames = []string{"localhost"}
	s.opts.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	return s
}

func TestSelfManagedCoversExtraDNSNamesAndIPs(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	c := newFakeClient(t, nil, webhookConfigs()...)
	a := withExtraSANs(newReplica(t, c, clk))
	require.NoError(t, a.Sync(ctx))

	sec := getSecret(t, c)
	leaf, err := parseLeaf(sec.Data[corev1.TLSCertKey])
	require.NoError(t, err)
	for _, host := range []string{"trainguard.trainguard-system.svc", "localhost", "127.0.0.1", "::1"} {
		assert.NoError(t, leaf.VerifyHostname(host), "serving certificate must cover %s", host)
	}
	assert.Error(t, leaf.VerifyHostname("10.0.0.1"), "no IP beyond the configured ones")
	assertFilesMatchSecret(t, a.opts.CertDir, sec)
}

func TestSelfManagedRotatesSecretLackingExtraSANs(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	c := newFakeClient(t, nil, webhookConfigs()...)

	// A replica configured without the extra names creates the Secret...
	plain := newReplica(t, c, clk)
	require.NoError(t, plain.Sync(ctx))
	require.Equal(t, "1", getSecret(t, c).Annotations[AnnotationGeneration])

	// ...one that needs them replaces it, keeping the old CA trusted...
	extra := withExtraSANs(newReplica(t, c, clk))
	require.NoError(t, extra.Sync(ctx))
	sec := getSecret(t, c)
	assert.Equal(t, "2", sec.Annotations[AnnotationGeneration])
	assert.Len(t, certsOf(t, sec.Data[CAFile]), 2, "the previous CA stays in the bundle")
	leaf, err := parseLeaf(sec.Data[corev1.TLSCertKey])
	require.NoError(t, err)
	assert.NoError(t, leaf.VerifyHostname("127.0.0.1"))

	// ...and the plain replica adopts the result instead of rotating back.
	require.NoError(t, plain.Sync(ctx))
	require.NoError(t, extra.Sync(ctx))
	assert.Equal(t, sec.ResourceVersion, getSecret(t, c).ResourceVersion, "replicas must not rotate back and forth")
	assertFilesMatchSecret(t, plain.opts.CertDir, sec)
}
