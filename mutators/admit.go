package mutators

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// The webhook and `trainguard inject` call the chain once per object:
// MutateJob for a job with pod templates, MutatePod for a pod. Everything
// between the policy and the diff is decided here, in one pass: whether a
// pod is trainguard's to inject, the accelerator decision a job's templates
// share, every injection of the registry, and the job-level marks.

// MutateJob runs the chain on every pod template of job (of the kind
// adapter handles) under policy p, then puts the job-level vocabulary on
// the job itself. The kind and its operator's job-name labels name the
// job's checkpoint directory. It returns the warnings.
func MutateJob(job jobs.Job, adapter *jobs.Adapter, p *contract.Policy) []string {
	kind, labels := adapter.GVK.GroupKind(), adapter.JobNameLabels
	tpls := job.Templates()
	// A GPU on one replica type (a Master) means the job wants one on all;
	// decided once here for every template.
	decided := false
	if !p.GPUForAll {
		specs := make([]*corev1.PodSpec, len(tpls))
		for i, tpl := range tpls {
			specs[i] = tpl.Spec
		}
		p.GPUForAll, decided = AcceleratorMeant(p, specs...), true
	}
	var applied, warnings []string
	torchrun := job.Elastic().Enabled
	for _, tpl := range tpls {
		// A template without containers is invalid and the validating
		// webhook says so; there is nothing to inject into.
		if len(tpl.Spec.Containers) == 0 {
			continue
		}
		t := &Target{Meta: tpl.Meta, Spec: tpl.Spec, Policy: p, Where: tpl.Where(), Kind: kind, JobNameLabels: labels,
			PodRestartPolicy: tpl.PodRestartPolicy, noAccelerator: decided && !p.GPUForAll, Torchrun: torchrun}
		applied = append(applied, injectTemplate(t)...)
		warnings = append(warnings, t.Warnings()...)
	}
	markJob(job.Meta(), p, applied)
	return warnings
}

// markJob puts MindCluster's job-level vocabulary on the job itself (where
// MindCluster reads it) and the marker listing what any template received.
// Its warnings are dropped: the templates got the same labels and said so.
func markJob(meta *metav1.ObjectMeta, p *contract.Policy, applied []string) {
	t := &Target{Meta: meta, Policy: p}
	if p.Enabled(contract.InjectionRecoverStrategy) {
		RecoverStrategy(t)
	}
	if p.Enabled(contract.InjectionTaskD) && p.TaskD {
		MindClusterLabels(t) // under TaskD's switch, like the templates' (mindcluster.go)
	}
	Mark(meta, applied)
}

// PodRequest is one pod to mutate.
type PodRequest struct {
	Pod    *corev1.Pod
	Policy *contract.Policy
	// Kinds are the job kinds whose templates trainguard injects: a pod
	// one of them controls was the job's to opt in.
	Kinds jobs.Kinds
	// Record reads the rescheduler's record of the pod's job: the nodes
	// the pod must avoid, and whether the job's in-place restarts were
	// stopped at its cap. It is called only for a pod that is injected.
	// Nil: no record.
	Record func() (avoid []string, inPlaceStopped bool, err error)
}

// MutatePod handles a pod: only what is decided per pod for a pod whose
// template trainguard injected, the whole chain for any other training
// pod. It returns the warnings, or why the pod is left alone.
func MutatePod(r PodRequest) (warnings []string, skip string, err error) {
	pod, p := r.Pod, r.Policy
	if len(pod.Spec.Containers) == 0 {
		return nil, "pod has no containers", nil
	}
	injected := contract.Injected(pod.Annotations)
	if !injected {
		if ownedByJob(r.Kinds, pod) {
			return nil, "pod of a job that trainguard did not inject (the job opted out or predates the opt-in)", nil
		}
		warnings, skip = trainingPod(pod, p.TrainingContainers)
		if skip != "" {
			return nil, skip, nil
		}
	}
	var avoid []string
	var stopped bool
	if r.Record != nil {
		if avoid, stopped, err = r.Record(); err != nil {
			return nil, "", err
		}
	}
	t := &Target{Meta: &pod.ObjectMeta, Spec: &pod.Spec, Policy: p, InPlaceStopped: stopped}
	if injected {
		setManaged(t)
	} else {
		injectTemplate(t)
	}
	injectPerPod(t, avoid)
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

// ownedByJob reports whether a job of a kind trainguard handles controls
// the pod: its template was trainguard's to inject.
func ownedByJob(kinds jobs.Kinds, pod *corev1.Pod) bool {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		for _, a := range kinds.All() {
			// A controller of an UncontrolledOnly kind (a batch Job) may itself
			// be a CronJob's or a JobSet's, whose pods are injected here.
			if a.UncontrolledOnly || a.Pod != nil {
				continue
			}
			if ref.Kind == a.GVK.Kind {
				return true
			}
		}
	}
	return false
}
