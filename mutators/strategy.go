package mutators

import "github.com/trainguard/trainguard/internal/foundations/contract"

// RecoverStrategy sets MindCluster's recover-strategy annotation and
// fault-scheduling label where absent: the user's values always win.
func RecoverStrategy(t *Target) bool {
	setIfAbsent(&t.Meta.Annotations, contract.AnnotationMindClusterRecoverStrategy, t.Policy.RecoverStrategy)
	setIfAbsent(&t.Meta.Labels, contract.LabelMindClusterFaultScheduling, t.Policy.FaultScheduling)
	return true
}
