package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/contract"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/mutators"
)

func (i *Injector) injectPod(ctx context.Context, namespace string, raw []byte, nsAnn map[string]string) (Result, error) {
	var pod corev1.Pod
	if err := decodeObject(raw, &pod); err != nil {
		return Result{}, fmt.Errorf("decoding Pod: %w", err)
	}
	if contract.OptedOut(pod.Annotations) {
		return Result{Skipped: "pod opted out with " + contract.AnnotationInject + "=" + contract.InjectDisabled}, nil
	}
	base := pod.DeepCopy()
	p, warnings := policy.Resolve(i.Config, nsAnn, pod.Annotations)
	t := &mutators.Target{Meta: &pod.ObjectMeta, Spec: &pod.Spec, Policy: p}
	if len(pod.Spec.Containers) == 0 {
		return Result{Skipped: "pod has no containers"}, nil
	}
	injected := contract.Injected(pod.Annotations)
	if !injected {
		if ownedByJob(&pod) {
			return Result{Skipped: "pod of a PyTorchJob that trainguard did not inject (the job opted out or predates the opt-in)"}, nil
		}
		if !contract.OptedIn(pod.Annotations) && !contract.HasNamedTrainingContainer(&pod.Spec, p.TrainingContainers) {
			return Result{Skipped: "not a training pod: no container named one of " + fmt.Sprint(p.TrainingContainers) +
				" and no " + contract.AnnotationInject + "=" + contract.InjectEnabled + " annotation"}, nil
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

// ownedByJob reports whether a PyTorchJob controls the pod.
func ownedByJob(pod *corev1.Pod) bool {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "PyTorchJob" {
			return true
		}
	}
	return false
}
