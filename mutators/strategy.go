package mutators

import "github.com/trainguard/trainguard/internal/policy"

// RecoverStrategy sets MindCluster's recover-strategy annotation and
// fault-scheduling label where absent: the user's values always win.
func RecoverStrategy(t *Target) bool {
	setIfAbsent(&t.Meta.Annotations, policy.AnnotationMindClusterRecoverStrategy, t.Policy.RecoverStrategy)
	setIfAbsent(&t.Meta.Labels, policy.LabelMindClusterFaultScheduling, t.Policy.FaultScheduling)
	return true
}
