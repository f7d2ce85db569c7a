package validators

import (
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// TrainJobAnnotations reads the annotations of TrainJob name in namespace;
// found is false when there is none. The validating webhook reads TrainJobs
// as the mutating one does, so a trainer pod is checked against the policy
// it was injected with (its TrainJob's annotations), not its own alone.
type TrainJobAnnotations func(namespace, name string) (annotations map[string]string, found bool, err error)

// resolveFor is the effective policy of a job; a TrainJob's trainer pod
// takes its TrainJob's annotations and Trainer's container name, exactly as
// the mutating webhook resolved it (webhook/trainjob.go).
func (v *Validator) resolveFor(job jobs.Job, nsAnnotations map[string]string) (*contract.Policy, []string) {
	pod, isPod := job.(jobs.PodJob)
	if !isPod || v.TrainJobs == nil {
		return v.resolve(nsAnnotations, job.Meta().Annotations)
	}
	claim, ok, _ := jobs.TrainJobPod(pod.Pod)
	if !ok {
		return v.resolve(nsAnnotations, job.Meta().Annotations)
	}
	tjAnn, found, err := v.TrainJobs(pod.Namespace, claim.TrainJob)
	if err != nil || !found {
		return v.resolve(nsAnnotations, job.Meta().Annotations)
	}
	p, warnings := v.resolve(nsAnnotations, jobs.MergeTrainJobAnnotations(tjAnn, pod.Annotations))
	p.TrainingContainers = jobs.TrainingContainerNames(p.TrainingContainers)
	return p, warnings
}
