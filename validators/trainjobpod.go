package validators

import (
	"context"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// TrainJobAnnotations reads the annotations of TrainJob name in namespace;
// found is false when there is none. The validating webhook reads TrainJobs
// as the mutating one does, so a trainer pod is checked against the policy
// it was injected with (its TrainJob's annotations), not its own alone.
type TrainJobAnnotations func(namespace, name string) (annotations map[string]string, found bool, err error)

// resolveFor is the effective policy of a job; a TrainJob's trainer pod
// takes its TrainJob's annotations and Trainer's container name, exactly as
// the mutating webhook resolved it (policy.LayerOf). A TrainJob that cannot
// be read leaves the pod on its own.
func (v *Validator) resolveFor(a *jobs.Adapter, job jobs.Job, nsAnnotations map[string]string) (*contract.Policy, []string) {
	var lookup policy.TrainJobLookup
	if v.TrainJobs != nil {
		lookup = func(_ context.Context, namespace, name string) (map[string]string, bool, error) {
			return v.TrainJobs(namespace, name)
		}
	}
	layer, err := policy.LayerOf(context.Background(), a, job, "", lookup)
	if err != nil {
		layer = policy.Layer{Annotations: job.Meta().Annotations}
	}
	p, warnings := v.resolve(nsAnnotations, layer.Annotations)
	layer.Apply(p)
	return p, warnings
}
