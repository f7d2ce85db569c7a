package podspec

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// NodeAvoider tells the pod mutator which nodes a new pod must not land on:
// nodes the rescheduler recorded as bad for the pod's job, not yet expired.
// The pod webhook calls it on every pod CREATE, so implementations must read
// from an informer cache, never the API server directly.
type NodeAvoider interface {
	AvoidNodes(ctx context.Context, pod *corev1.Pod) ([]string, error)
	// InPlaceStopped says the rescheduler stopped the in-place restarts of
	// the pod's job (they reached its cap): the pod gets no restart rules.
	// Only trainguard writes what it reads, so nothing a tenant writes can
	// turn the rules back on.
	InPlaceStopped(ctx context.Context, pod *corev1.Pod) (bool, error)
}
