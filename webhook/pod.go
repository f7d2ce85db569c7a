package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/podspec"
)

// fromRecord returns how the mutators ask the rescheduler's record which
// nodes the pod must avoid and whether its job's in-place restarts were
// stopped at the cap (nil without a record). A pod being created may not
// carry its namespace yet; the request does.
func (i *Injector) fromRecord(ctx context.Context, pod *corev1.Pod, namespace string) func() (podspec.Avoid, bool, error) {
	if i.Avoider == nil {
		return nil
	}
	return func() (podspec.Avoid, bool, error) {
		lookup := pod
		if pod.Namespace == "" && namespace != "" {
			shallow := *pod
			shallow.Namespace = namespace
			lookup = &shallow
		}
		nodes, err := i.Avoider.AvoidNodes(ctx, lookup)
		if err != nil {
			return podspec.Avoid{}, false, fmt.Errorf("reading bad nodes for pod: %w", err)
		}
		stopped, err := i.Avoider.InPlaceStopped(ctx, lookup)
		if err != nil {
			return podspec.Avoid{}, false, fmt.Errorf("reading the in-place restarts of the pod's job: %w", err)
		}
		return nodes, stopped, nil
	}
}
