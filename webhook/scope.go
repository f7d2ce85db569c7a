package webhook

import (
	"context"
	"fmt"

	"github.com/trainguard/trainguard/internal/config"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// NamespaceAnnotations returns a namespace's annotations; found is false for
// an unknown namespace. The webhook backs it with the manager's informer.
type NamespaceAnnotations func(ctx context.Context, name string) (annotations map[string]string, found bool, err error)

// Scope is the one opt-in sequence: whether trainguard acts on objects of a
// namespace at all. The mutating and the validating endpoints both ask it,
// so an object is validated exactly when it would be mutated.
type Scope struct {
	Config *config.Config
	// OwnNamespace is trainguard's namespace, never acted on.
	OwnNamespace string
	// Namespaces looks up namespace annotations (opt-in and overrides).
	Namespaces NamespaceAnnotations
}

// Namespace returns the annotations of a namespace trainguard acts in, or
// why it does not (skip): excluded, unknown, or not opted in.
func (s *Scope) Namespace(ctx context.Context, ns string) (annotations map[string]string, skip string, err error) {
	if s.Config.Excluded(ns) || (s.OwnNamespace != "" && ns == s.OwnNamespace) {
		return nil, "namespace " + ns + " is excluded", nil
	}
	ann, found, err := s.Namespaces(ctx, ns)
	if err != nil {
		return nil, "", fmt.Errorf("looking up namespace %q: %w", ns, err)
	}
	if !found {
		return nil, "namespace " + ns + " not found", nil
	}
	if !contract.NamespaceEnabled(s.Config.ClusterWide, ann) {
		return nil, "namespace " + ns + " has not opted in", nil
	}
	return ann, "", nil
}
