package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestKubeNamespacesAreAlwaysExcluded: kube-public, kube-node-lease and
// every other kube-* namespace are never injected, whatever the list says,
// so cluster-wide mode cannot hand trainguard's account the namespaces of
// Kubernetes add-ons.
func TestKubeNamespacesAreAlwaysExcluded(t *testing.T) {
	cfg := Default()
	cfg.ClusterWide = true
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease", "kube-flannel"} {
		assert.True(t, cfg.Excluded(ns), ns)
	}
	for _, ns := range []string{"ml-team", "kubeflow", "kube", "team-kube-x"} {
		assert.False(t, cfg.Excluded(ns), ns)
	}
}
