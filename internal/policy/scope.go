package policy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// NamespaceAnnotations returns a namespace's annotations; found is false for
// an unknown namespace. The webhook backs it with the manager's metadata
// informer, the controllers with their cache (ClientNamespaces).
type NamespaceAnnotations func(ctx context.Context, name string) (annotations map[string]string, found bool, err error)

// ClientNamespaces reads namespaces with c: the controllers' cache.
func ClientNamespaces(c client.Reader) NamespaceAnnotations {
	return func(ctx context.Context, name string) (map[string]string, bool, error) {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, false, nil
			}
			return nil, false, err
		}
		return ns.Annotations, true, nil
	}
}

// Scope is the one decision whether trainguard owns an object: its
// namespace is neither excluded nor trainguard's own, the namespace opted
// in (or cluster-wide mode and it did not opt out), and the object did not
// opt out. The mutating and the validating endpoints, the validators and
// the rescheduler all ask it, so an object is validated exactly when it
// would be mutated, and the rescheduler acts only on pods the webhook would
// inject (the trainguard.io/managed label alone is anyone's to set).
type Scope struct {
	Config *configv1alpha1.Configuration
	// OwnNamespace is trainguard's namespace, never acted on.
	OwnNamespace string
	// Namespaces looks up namespace annotations (opt-in and overrides).
	Namespaces NamespaceAnnotations
}

// Namespace returns the annotations of a namespace trainguard acts in, or
// why it does not (skip): excluded, unknown, or not opted in. An excluded
// namespace is never looked up.
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

// Object is Namespace for an object with these annotations in ns, which
// also must not have opted out.
func (s *Scope) Object(ctx context.Context, ns string, annotations map[string]string) (nsAnnotations map[string]string, skip string, err error) {
	nsAnnotations, skip, err = s.Namespace(ctx, ns)
	if err != nil || skip != "" {
		return nil, skip, err
	}
	if skip := OptOut(annotations); skip != "" {
		return nil, skip, nil
	}
	return nsAnnotations, "", nil
}

// OptOut says why an object in a namespace trainguard acts in is still
// left alone (it opted out), or "" when it is trainguard's. The webhook
// asks it once it has decoded the object, after Namespace: a namespace
// not in scope costs no decoding.
func OptOut(annotations map[string]string) string {
	if contract.OptedOut(annotations) {
		return "the object opted out (" + contract.AnnotationInject + ": " + contract.InjectDisabled + ")"
	}
	return ""
}
