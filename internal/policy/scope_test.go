package policy

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// TestScopeDecidesWhetherTrainguardOwnsAnObject is the one scope decision
// the webhook's endpoints, the validators and the rescheduler share: every
// way an object falls outside it, and the lookups it must not make.
func TestScopeDecidesWhetherTrainguardOwnsAnObject(t *testing.T) {
	enabled := map[string]string{contract.AnnotationInject: contract.InjectEnabled}
	disabled := map[string]string{contract.AnnotationInject: contract.InjectDisabled}
	namespaces := map[string]map[string]string{
		"team-a": enabled, "plain": {}, "opted-out": disabled,
		// Annotated as opted in, yet never acted on.
		"kube-system": enabled, "trainguard-system": enabled,
	}
	for _, tc := range []struct {
		name        string
		clusterWide bool
		ns          string
		obj         map[string]string
		skip        string
		lookedUp    bool
	}{
		{name: "opted-in namespace", ns: "team-a", lookedUp: true},
		{name: "object opted in", ns: "team-a", obj: enabled, lookedUp: true},
		{name: "object opted out", ns: "team-a", obj: disabled, skip: "the object opted out (trainguard.io/inject: disabled)", lookedUp: true},
		{name: "namespace not opted in", ns: "plain", skip: "namespace plain has not opted in", lookedUp: true},
		{name: "cluster-wide", clusterWide: true, ns: "plain", lookedUp: true},
		{name: "cluster-wide, namespace opted out", clusterWide: true, ns: "opted-out", skip: "namespace opted-out has not opted in", lookedUp: true},
		{name: "cluster-wide, object opted out", clusterWide: true, ns: "plain", obj: disabled, skip: "the object opted out (trainguard.io/inject: disabled)", lookedUp: true},
		{name: "excluded namespace", clusterWide: true, ns: "kube-system", skip: "namespace kube-system is excluded"},
		{name: "trainguard's own namespace", clusterWide: true, ns: "trainguard-system", skip: "namespace trainguard-system is excluded"},
		{name: "unknown namespace", clusterWide: true, ns: "gone", skip: "namespace gone not found", lookedUp: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := configv1alpha1.Default()
			cfg.ClusterWide = tc.clusterWide
			var lookups []string
			s := Scope{Config: cfg, OwnNamespace: "trainguard-system", Namespaces: func(_ context.Context, name string) (map[string]string, bool, error) {
				lookups = append(lookups, name)
				ann, ok := namespaces[name]
				return ann, ok, nil
			}}
			nsAnn, skip, err := s.Object(context.Background(), tc.ns, tc.obj)
			require.NoError(t, err)
			assert.Equal(t, tc.skip, skip)
			if tc.skip == "" {
				assert.Equal(t, namespaces[tc.ns], nsAnn, "an owned object gets its namespace's annotations (policy overrides)")
			} else {
				assert.Nil(t, nsAnn)
			}
			assert.Equal(t, tc.lookedUp, len(lookups) == 1, "lookups: %v", lookups)
		})
	}
}

// A failed lookup is an error, never taken for "not in scope": the webhook
// then refuses to guess, and the rescheduler retries.
func TestScopeLookupErrorIsAnError(t *testing.T) {
	boom := errors.New("cache not synced")
	s := Scope{Config: configv1alpha1.Default(), Namespaces: func(context.Context, string) (map[string]string, bool, error) {
		return nil, false, boom
	}}
	_, skip, err := s.Object(context.Background(), "team-a", nil)
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), `namespace "team-a"`)
	assert.Empty(t, skip)
}
