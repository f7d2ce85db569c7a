// Package webhook serves trainguard's admission endpoints and holds the one
// code path that both the webhook and `trainguard inject` use to mutate an
// object.
package webhook

import (
	"context"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"

	"github.com/trainguard/trainguard/internal/contract"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/mutators"
)

// NamespaceAnnotations returns a namespace's annotations; found is false for
// an unknown namespace. The webhook backs it with the manager's informer.
type NamespaceAnnotations func(ctx context.Context, name string) (annotations map[string]string, found bool, err error)

// Injector decides whether an object is mutated and computes the patch.
type Injector struct {
	Config *policy.Config
	// OwnNamespace is trainguard's namespace, never mutated.
	OwnNamespace string
	// Namespaces looks up namespace annotations (opt-in and overrides).
	Namespaces NamespaceAnnotations
	// Avoider gives the nodes a new pod must avoid; nil means none.
	Avoider mutators.NodeAvoider
	types   typeCache
}

// Request is one object to mutate.
type Request struct {
	Kind      Kind
	Namespace string
	Raw       []byte
	// OptedIn skips the namespace opt-in check (trainguard inject).
	OptedIn bool
	// NamespaceAnnotations, when non-nil, are used instead of a lookup.
	NamespaceAnnotations map[string]string
}

// Result is the outcome: a patch (possibly empty), warnings, and why
// nothing was done when Skipped is set.
type Result struct {
	Patch    []jsonpatch.Operation
	Warnings []string
	Skipped  string
}

// Inject mutates req's object as the webhook would.
func (i *Injector) Inject(ctx context.Context, req Request) (Result, error) {
	nsAnn := req.NamespaceAnnotations
	if nsAnn == nil && !req.OptedIn {
		if reason := i.namespaceSkip(req.Namespace); reason != "" {
			return Result{Skipped: reason}, nil
		}
		ann, found, err := i.Namespaces(ctx, req.Namespace)
		if err != nil {
			return Result{}, fmt.Errorf("looking up namespace %q: %w", req.Namespace, err)
		}
		if !found {
			return Result{Skipped: "namespace " + req.Namespace + " not found"}, nil
		}
		if !contract.NamespaceEnabled(i.Config.ClusterWide, ann) {
			return Result{Skipped: "namespace " + req.Namespace + " has not opted in"}, nil
		}
		nsAnn = ann
	}
	switch req.Kind {
	case KindKubeflowPyTorchJob:
		return i.injectKubeflowJob(req.Raw, nsAnn)
	case KindKubeDLPyTorchJob:
		return i.injectKubeDLJob(req.Raw, nsAnn)
	case KindPod:
		return i.injectPod(ctx, req.Namespace, req.Raw, nsAnn)
	}
	return Result{Skipped: "kind not handled"}, nil
}

func (i *Injector) namespaceSkip(ns string) string {
	if i.Config.Excluded(ns) || (i.OwnNamespace != "" && ns == i.OwnNamespace) {
		return "namespace " + ns + " is excluded"
	}
	return ""
}
