package mutators

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
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
	// the pod avoids, and whether the job's in-place restarts were
	// stopped at its cap. It is called only for a pod that is injected.
	// Nil: no record.
	Record func() (avoid podspec.Avoid, inPlaceStopped bool, err error)
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
		warnings, skip = trainingPod(pod, p)
		if skip != "" {
			return nil, skip, nil
		}
	}
	var avoid podspec.Avoid
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
// the container trainguard would inject into asks for an accelerator and
// runs python or torchrun, or it carries trainguard's own policy
// annotations. The last two are clear enough from a pod whose container is
// named otherwise (a GPU pod running `python train.py`; torchelastic's
// elastic-trainer-worker), so they are honoured, and a warning says why the
// pod was taken and how to leave it alone. skip says why a pod is not one.
func trainingPod(pod *corev1.Pod, p *contract.Policy) (warnings []string, skip string) {
	names := p.TrainingContainers
	if contract.OptedIn(pod.Annotations) || contract.HasNamedTrainingContainer(&pod.Spec, names) {
		return nil, ""
	}
	first := &pod.Spec.Containers[0]
	if res, prog := acceleratedPython(p, first); res != "" {
		return []string{fmt.Sprintf("container %q asks for %s and runs %s, so trainguard takes the pod for a training pod and injects it; "+
			"set %s=%s on the pod to leave it alone", first.Name, res, prog, contract.AnnotationInject, contract.InjectDisabled)}, ""
	}
	keys := contract.PolicyAnnotations(pod.Annotations)
	if len(keys) == 0 {
		return nil, NotTrainingPod(names)
	}
	return []string{fmt.Sprintf("no container is named one of %v, but the pod carries %s, so trainguard injects it and treats container %q as the training container; "+
		"name the training container one of %v, or set %s=%s to say so explicitly",
		names, strings.Join(keys, ", "), first.Name, names, contract.AnnotationInject, contract.InjectEnabled)}, ""
}

// NotTrainingPod is why a pod is left alone when nothing marks it as a
// training pod; docs/annotations.md lists the same three signs.
func NotTrainingPod(names []string) string {
	return fmt.Sprintf("not a training pod: no container named %s, its first container does not both ask for an accelerator and run python or torchrun, "+
		"and no %s: %s annotation", orList(names), contract.AnnotationInject, contract.InjectEnabled)
}

func orList(names []string) string {
	switch len(names) {
	case 0:
		return "(none configured)"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// acceleratedPython returns the accelerator c asks for and the program
// that shows it runs PyTorch (python, python3.N, torchrun, also inside
// `sh -c "..."`), or "" when either is missing.
func acceleratedPython(p *contract.Policy, c *corev1.Container) (corev1.ResourceName, string) {
	var res corev1.ResourceName
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name := range l {
			if isAccelerator(p, name) && (res == "" || name < res) {
				res = name
			}
		}
	}
	if res == "" {
		return "", ""
	}
	for _, list := range [][]string{c.Command, c.Args} {
		for _, w := range list {
			for _, tok := range strings.Fields(w) {
				if prog := pythonProgram(tok); prog != "" {
					return res, prog
				}
			}
		}
	}
	return "", ""
}

// pythonProgram is tok's program name when it is python, python3,
// python3.N or torchrun, given bare or by path.
func pythonProgram(tok string) string {
	base := tok[strings.LastIndexByte(tok, '/')+1:]
	switch {
	case base == "torchrun", base == "python", base == "python3":
		return base
	case strings.HasPrefix(base, "python3."):
		if _, err := strconv.Atoi(strings.TrimPrefix(base, "python3.")); err == nil {
			return base
		}
	}
	return ""
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
