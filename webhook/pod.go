package webhook

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/mutators"
)

// mutatePod handles a pod: only what is decided per pod for a pod whose
// template trainguard injected, the whole chain for any other training pod.
// It returns warnings, or why the pod is left alone.
func (i *Injector) mutatePod(ctx context.Context, pod jobs.PodJob, p *contract.Policy, namespace string) ([]string, string, error) {
	if len(pod.Spec.Containers) == 0 {
		return nil, "pod has no containers", nil
	}
	injected := contract.Injected(pod.Annotations)
	var warnings []string
	if !injected {
		if i.ownedByJob(pod.Pod) {
			return nil, "pod of a job that trainguard did not inject (the job opted out or predates the opt-in)", nil
		}
		var skip string
		warnings, skip = trainingPod(pod.Pod, p.TrainingContainers)
		if skip != "" {
			return nil, skip, nil
		}
	}
	avoid, stopped, err := i.fromRecord(ctx, pod.Pod, namespace)
	if err != nil {
		return nil, "", err
	}
	t := &mutators.Target{Meta: &pod.ObjectMeta, Spec: &pod.Spec, Policy: p, InPlaceStopped: stopped}
	if injected {
		mutators.InjectPodOfInjectedTemplate(t, avoid)
	} else {
		mutators.InjectPod(t, avoid)
	}
	return append(warnings, t.Warnings()...), "", nil
}

// trainingPod decides whether a pod nobody injected is a training pod: it
// asked with trainguard.io/inject=enabled, a container has a training name,
// or it carries trainguard's own policy annotations. The last is a clear
// request for trainguard even from a pod whose container is named
// otherwise (torchelastic's elastic-trainer-worker), so it is honoured, and
// a warning says how the container was chosen. skip says why a pod is not one.
func trainingPod(pod *corev1.Pod, names []string) (warnings []string, skip string) {
	if contract.OptedIn(pod.Annotations) || contract.HasNamedTrainingContainer(&pod.Spec, names) {
		return nil, ""
	}
	keys := contract.PolicyAnnotations(pod.Annotations)
	if len(keys) == 0 {
		return nil, "not a training pod: no container named one of " + fmt.Sprint(names) +
			" and no " + contract.AnnotationInject + "=" + contract.InjectEnabled + " annotation"
	}
	return []string{fmt.Sprintf("no container is named one of %v, but the pod carries %s, so trainguard injects it and treats container %q as the training container; "+
		"name the training container one of %v, or set %s=%s to say so explicitly",
		names, strings.Join(keys, ", "), pod.Spec.Containers[0].Name, names, contract.AnnotationInject, contract.InjectEnabled)}, ""
}

// fromRecord asks the rescheduler's record which nodes the pod must avoid
// and whether its job's in-place restarts were stopped at the cap. A pod
// being created may not carry its namespace yet; the request does.
func (i *Injector) fromRecord(ctx context.Context, pod *corev1.Pod, namespace string) ([]string, bool, error) {
	if i.Avoider == nil {
		return nil, false, nil
	}
	lookup := pod
	if pod.Namespace == "" && namespace != "" {
		shallow := *pod
		shallow.Namespace = namespace
		lookup = &shallow
	}
	nodes, err := i.Avoider.AvoidNodes(ctx, lookup)
	if err != nil {
		return nil, false, fmt.Errorf("reading bad nodes for pod: %w", err)
	}
	stopped, err := i.Avoider.InPlaceStopped(ctx, lookup)
	if err != nil {
		return nil, false, fmt.Errorf("reading the in-place restarts of the pod's job: %w", err)
	}
	return nodes, stopped, nil
}

// ownedByJob reports whether a job of a kind trainguard handles controls
// the pod: its template was trainguard's to inject.
func (i *Injector) ownedByJob(pod *corev1.Pod) bool {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		for _, a := range i.kinds().All() {
			if gvk := a.GVK(); gvk != corev1.SchemeGroupVersion.WithKind("Pod") && ref.Kind == gvk.Kind {
				return true
			}
		}
	}
	return false
}
