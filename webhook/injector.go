// Package webhook serves trainguard's admission endpoints and holds the one
// code path that both the webhook and `trainguard inject` use to mutate an
// object.
package webhook

import (
	"context"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/mutators"
	"github.com/trainguard/trainguard/optin"
	"github.com/trainguard/trainguard/policy"
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
		if !optin.NamespaceEnabled(i.Config, ann) {
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

func (i *Injector) injectPod(ctx context.Context, namespace string, raw []byte, nsAnn map[string]string) (Result, error) {
	var pod corev1.Pod
	if err := decodeObject(raw, &pod); err != nil {
		return Result{}, fmt.Errorf("decoding Pod: %w", err)
	}
	if optin.ObjectDisabled(pod.Annotations) {
		return Result{Skipped: "pod opted out with " + policy.AnnotationInject + "=" + policy.InjectDisabled}, nil
	}
	base := pod.DeepCopy()
	p, warnings := policy.Resolve(i.Config, nsAnn, pod.Annotations)
	t := &mutators.Target{Meta: &pod.ObjectMeta, Spec: &pod.Spec, Policy: p}
	if len(pod.Spec.Containers) == 0 {
		return Result{Skipped: "pod has no containers"}, nil
	}
	injected := hasMarker(pod.Annotations)
	if !injected {
		if ownedByJob(&pod) {
			return Result{Skipped: "pod of a PyTorchJob that trainguard did not inject (the job opted out or predates the opt-in)"}, nil
		}
		if !optin.ObjectEnabled(pod.Annotations) && !mutators.HasNamedTrainingContainer(&pod.Spec, p.TrainingContainers) {
			return Result{Skipped: "not a training pod: no container named one of " + fmt.Sprint(p.TrainingContainers) +
				" and no " + policy.AnnotationInject + "=" + policy.InjectEnabled + " annotation"}, nil
		}
	}
	avoid, err := i.avoidNodes(ctx, &pod, namespace)
	if err != nil {
		return Result{}, err
	}
	if injected {
		mutators.InjectPodOfInjectedTemplate(t, avoid)
	} else {
		mutators.InjectPod(t, avoid)
	}
	ops, err := typedDiff(&i.types, base, &pod)
	if err != nil {
		return Result{}, fmt.Errorf("diffing mutated Pod: %w", err)
	}
	return Result{Patch: ops, Warnings: append(warnings, t.Warnings()...)}, nil
}

// avoidNodes asks the rescheduler's record which nodes the pod must avoid.
// A pod being created may not carry its namespace yet; the request does.
func (i *Injector) avoidNodes(ctx context.Context, pod *corev1.Pod, namespace string) ([]string, error) {
	if i.Avoider == nil {
		return nil, nil
	}
	lookup := pod
	if pod.Namespace == "" && namespace != "" {
		shallow := *pod
		shallow.Namespace = namespace
		lookup = &shallow
	}
	nodes, err := i.Avoider.AvoidNodes(ctx, lookup)
	if err != nil {
		return nil, fmt.Errorf("reading bad nodes for pod: %w", err)
	}
	return nodes, nil
}

func hasMarker(ann map[string]string) bool {
	_, ok := ann[policy.AnnotationInjected]
	return ok
}

// ownedByJob reports whether a PyTorchJob controls the pod.
func ownedByJob(pod *corev1.Pod) bool {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "PyTorchJob" {
			return true
		}
	}
	return false
}
