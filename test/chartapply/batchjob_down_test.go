package chartapply

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/testing/builders"
)

// Issue 33, item 6: a user's batch Job is checked at creation and fails
// closed with trainguard down, like a PyTorchJob; a Job a CronJob or a
// JobSet (a TrainJob's) makes is never sent (the no-controller
// matchCondition, evaluated by the real API server), so trainguard down
// never blocks them, and an UPDATE of any Job (Kueue's suspend toggle, a
// label) goes through.
func TestControlledBatchJobsPassWhileTrainguardDown(t *testing.T) {
	ctx := context.Background()
	const release, ns, tenant = "jobdown", "jobdown-system", "jobdown-in"
	tenantNamespace(t, tenant, optIn("enabled"))
	unstructuredOf := func(raw []byte) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(raw))
		return u
	}
	running := unstructuredOf(builders.MakeBatchJob(tenant, "running").JSON())
	require.NoError(t, apiServer.c.Create(ctx, running), "created while trainguard was up")

	installTrainguardDown(t, release, ns, tenant, func(name string) bool { return strings.HasPrefix(name, "jobs") })
	require.Eventually(t, func() bool {
		err := apiServer.c.Create(ctx, unstructuredOf(builders.MakeBatchJob(tenant, "refused").JSON()), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "jobs.validate.trainguard.io")
	}, 30*time.Second, 100*time.Millisecond, "a user's new Job in an opted-in namespace is refused while trainguard is down (fail closed)")

	for _, owner := range []struct{ apiVersion, kind string }{{"batch/v1", "CronJob"}, {"jobset.x-k8s.io/v1alpha2", "JobSet"}} {
		made := builders.MakeBatchJob(tenant, "made-by-"+strings.ToLower(owner.kind)).ControlledBy(owner.apiVersion, owner.kind, "parent")
		assert.NoError(t, apiServer.c.Create(ctx, unstructuredOf(made.JSON()), client.DryRunAll),
			"a %s's Job is its controller's: never sent, never blocked", owner.kind)
	}
	for what, p := range map[string]string{
		"a label edit":                           `{"metadata":{"labels":{"team":"vision"}}}`,
		"Kueue's suspend toggle (a spec change)": `{"spec":{"suspend":true}}`,
	} {
		assert.NoError(t, apiServer.c.Patch(ctx, running.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(p))), "%s while trainguard is down", what)
	}
}
