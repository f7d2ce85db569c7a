package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// avoidNodes returns how the mutators ask the rescheduler's record which
// nodes the pod must avoid (nil without a record). A pod being created may
// not carry its namespace yet; the request does.
func (i *Injector) avoidNodes(ctx context.Context, pod *corev1.Pod, namespace string) func() ([]string, error) {
	if i.Avoider == nil {
		return nil
	}
	return func() ([]string, error) {
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
}
