package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// TestAuditModeAdmitsUnchangedAndReports: through a real kube-apiserver,
// a namespace opted in with trainguard.io/admission-mode=audit admits a
// job trainguard would refuse, stored exactly as written (nothing
// injected), with the refusal and the would-be injection as warnings the
// client sees, an AuditWouldRefuse Event and the audit metric; the same
// job in an enforcing namespace is refused.
func TestAuditModeAdmitsUnchangedAndReports(t *testing.T) {
	ctx := context.Background()
	c, rec := warningClient(t)

	ns := namespace(t, true, map[string]string{contract.AnnotationAdmissionMode: contract.ModeAudit})
	require.NoError(t, c.Create(ctx, job(t, ns, "would-refuse", invalidElasticSpec)), "audit mode admits what enforce refuses")
	warnings := rec.Take()
	t.Logf("warnings: %q", warnings)
	assert.Equal(t, 1, countContaining(warnings, "audit mode, nothing changed: trainguard would inject prestop,"), "%q", warnings)
	assert.Equal(t, 1, countContaining(warnings, "audit mode, nothing changed: trainguard would refuse this object: spec.elasticPolicy.maxReplicas"), "%q", warnings)

	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(job(t, ns, "x", invalidElasticSpec).GroupVersionKind())
	require.NoError(t, env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "would-refuse"}, stored))
	assert.NotContains(t, stored.GetAnnotations(), contract.AnnotationInjected, "nothing injected")
	containers, _, _ := unstructured.NestedSlice(stored.Object, "spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers")
	require.Len(t, containers, 1)
	assert.NotContains(t, containers[0], "lifecycle", "no preStop hook")

	ev := awaitEvents(t, ns, "AuditWouldRefuse", "AuditWouldInject")[0]
	t.Logf("Event: %s %s: %s", ev.Reason, ev.InvolvedObject.Name, ev.Message)
	assert.Equal(t, "would-refuse", ev.InvolvedObject.Name)
	assert.Contains(t, ev.Message, "spec.elasticPolicy.maxReplicas")
	assert.Contains(t, ev.Message, "(1 such object(s) in namespace "+ns)
	assert.Equal(t, 1.0, auditCount(t, ns, "would-refuse"))
	assert.Equal(t, 1.0, auditCount(t, ns, "would-inject"))

	enforced := namespace(t, true, map[string]string{contract.AnnotationAdmissionMode: contract.ModeEnforce})
	err := c.Create(ctx, job(t, enforced, "refused", invalidElasticSpec))
	require.Error(t, err, "enforce refuses it")
	assert.Contains(t, err.Error(), "spec.elasticPolicy.maxReplicas")
}

// auditCount reads trainguard_audit_objects_total for a namespace's PyTorchJobs.
func auditCount(t *testing.T, ns, verdict string) float64 {
	t.Helper()
	return counterSum(t, "trainguard_audit_objects_total", "namespace", ns, "kind", "PyTorchJob", "verdict", verdict)
}
