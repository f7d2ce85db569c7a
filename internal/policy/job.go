package policy

import (
	"context"
	"fmt"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// TrainJobLookup returns the annotations of TrainJob name in namespace;
// found is false when there is no such TrainJob (or Trainer is not
// installed).
type TrainJobLookup func(ctx context.Context, namespace, name string) (annotations map[string]string, found bool, err error)

// Layer is a job's own layer of its policy, above the configuration and
// the namespace. The mutating and the validating webhook both read it
// (LayerOf), so a pod is checked against the policy it was injected with.
type Layer struct {
	// Annotations are the object's own; for a trainer pod of a TrainJob,
	// the TrainJob's with the pod's on top.
	Annotations map[string]string
	// TrainJob names the TrainJob of a trainer pod; empty for anything else.
	TrainJob string
	// TrainJobOptedOut: that TrainJob opted out of injection.
	TrainJobOptedOut bool
}

// LayerOf reads the job's layer. A trainer pod of a TrainJob
// (jobs.TrainJobPod) takes its TrainJob's annotations. The pod's labels
// only say which TrainJob to read: it must exist in the pod's own namespace
// (namespace, when the pod carries none yet), so labels a tenant writes can
// never opt a pod in, and a TrainJob in another namespace is never
// consulted. With lookup nil every pod stands on its own.
func LayerOf(ctx context.Context, a *jobs.Adapter, job jobs.Job, namespace string, lookup TrainJobLookup) (Layer, error) {
	own := Layer{Annotations: job.Meta().Annotations}
	if a.Pod == nil || lookup == nil {
		return own, nil
	}
	pod := a.Pod(job)
	claim, ok, _ := jobs.TrainJobPod(pod)
	if !ok {
		return own, nil
	}
	ns := pod.Namespace
	if ns == "" {
		ns = namespace
	}
	ann, found, err := lookup(ctx, ns, claim.TrainJob)
	if err != nil {
		return own, fmt.Errorf("reading TrainJob %s/%s named by the pod's %s label: %w", ns, claim.TrainJob, trainerv1alpha1.LabelJobSetName, err)
	}
	if !found {
		return own, nil
	}
	return Layer{Annotations: jobs.MergeTrainJobAnnotations(ann, pod.Annotations), TrainJob: claim.TrainJob,
		TrainJobOptedOut: contract.OptedOut(ann)}, nil
}

// Apply puts on p what the layer says beyond annotations: a TrainJob's
// trainer pod injects Trainer's trainer container (node) and keeps its
// checkpoints in the TrainJob's directory, which all its trainer pods
// share across restarts (the TrainJob exists in the pod's namespace under
// this name: LayerOf read it).
func (l Layer) Apply(p *contract.Policy) {
	if l.TrainJob == "" {
		return
	}
	p.TrainingContainers = jobs.TrainingContainerNames(p.TrainingContainers)
	if contract.IsPathComponentSafe(l.TrainJob) {
		p.JobDirectory = "trainjob/" + l.TrainJob
	}
}
