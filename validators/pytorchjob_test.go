package validators

import (
	"testing"

	"github.com/stretchr/testify/assert"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/testing/builders"
	"github.com/trainguard/trainguard/internal/testing/ruletable"
)

// ruleCase is one row of a rule table: the object, the exact field paths of
// the errors it must produce (none for a valid object), and optionally a
// warning that must (or must not) be returned.
type ruleCase struct {
	name   string
	obj    Object
	errs   []string
	warn   string
	noWarn string
}

func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := validate(t, tc.obj)
			ruletable.Expect(t, res.Errors, res.Warnings, tc.errs, tc.warn, tc.noWarn)
		})
	}
}

// TestKubeflowUpdateRules: an UPDATE runs the kind's update rules
// (jobs.Adapter.ValidateUpdate) on top of its own; the rest of the kind's
// rule table is internal/jobs' (kubeflow_rules_test.go).
func TestKubeflowUpdateRules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "managedBy unchanged on update", obj: updatedFrom(object(job().WithManagedBy("kueue.x-k8s.io/multikueue").WithWorker(2)), job().WithManagedBy("kueue.x-k8s.io/multikueue"))},
		{name: "managedBy changed on update", obj: updatedFrom(object(job().WithManagedBy("kueue.x-k8s.io/multikueue")), job()),
			errs: []string{"spec.runPolicy.managedBy"}},
	})
}

// TestKubeflowAllErrorsAtOnce checks that every problem is reported in one
// answer, so a user fixes a job in one round trip.
func TestKubeflowAllErrorsAtOnce(t *testing.T) {
	obj := object(job().WithName("Bad_Name").WithMaster(builders.Ptr[int32](3)).WithElastic(3, 2).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
		ep.RDZVBackend, ep.RDZVPort, ep.MaxRestarts = builders.Ptr("zk"), builders.Ptr[int32](0), builders.Ptr[int32](-5)
	}).WithNproc("many"))
	res := validate(t, obj)
	assert.ElementsMatch(t, []string{
		"metadata.name", "spec.nprocPerNode", "spec.elasticPolicy.maxReplicas", "spec.elasticPolicy.rdzvBackend",
		"spec.elasticPolicy.rdzvPort", "spec.elasticPolicy.maxRestarts",
	}, paths(res.Errors))
}

// TestKubeflowMessages pins messages that tell the user the fix.
func TestKubeflowMessages(t *testing.T) {
	res := validate(t, object(job().WithElastic(3, 2).WithWorker(2)))
	if assert.Len(t, res.Errors, 1) {
		assert.Equal(t, "spec.elasticPolicy.maxReplicas: Invalid value: 2: must be ≥ minReplicas (3); raise maxReplicas or lower minReplicas", res.Errors[0].Error())
	}
	res = validate(t, object(job().WithElastic(2, 4).WithWorker(1)))
	if assert.Len(t, res.Errors, 1) {
		assert.Equal(t, "spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: 1: must be between spec.elasticPolicy.minReplicas (2) and spec.elasticPolicy.maxReplicas (4); set replicas in that range or change the elastic policy", res.Errors[0].Error())
	}
}
