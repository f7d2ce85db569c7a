package chartapply

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// boostPatch is what the priority-boost controller writes
// (internal/controllers/boost apply): a merge patch of one annotation.
func boostPatch(v string) string {
	return fmt.Sprintf(`{"metadata":{"annotations":{"kueue.x-k8s.io/priority-boost":%s}}}`, v)
}

func workloadIn(t *testing.T, ns string) []byte {
	t.Helper()
	return []byte(`{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"Workload","metadata":{"namespace":"` + ns +
		`","name":"fenceboost","annotations":{"example.com/team":"a"}},"spec":{"queueName":"training","podSets":[{"name":"main","count":1,` +
		`"template":{"spec":{"containers":[{"name":"pytorch","image":"registry.example/train:1"}]}}}]}}`)
}

// Issue 30: trainguard's ServiceAccount may write on a Kueue Workload only
// the kueue.x-k8s.io/priority-boost annotation, to a bounded non-negative
// integer, and only in namespaces trainguard injects. A stolen token can
// neither raise a job past its priority class (the value's bound, and the
// Workload's spec.priority untouched), nor requeue, suspend or reshape a
// Workload, nor touch any other tenant's.
func TestAdmissionPolicyFencesWorkloads(t *testing.T) {
	const release, ns, policy = "fenceboost", "fenceboost-system", "fenceboost-trainguard-fence"
	sa := installFence(t, release, ns)
	pod := tenantNamespace(t, "fenceboost-in", optIn("enabled"))
	waitPolicyActive(t, sa, podIn(t, ns), policy)
	ensureNamespace(t, context.Background(), "fenceboost-out")

	in := job(t, workloadIn(t, pod.Namespace))
	out := job(t, workloadIn(t, "fenceboost-out"))

	for _, v := range []string{`"0"`, `"49"`, `"9999999"`, `null`} {
		assert.NoError(t, dryPatch(sa, in, types.MergePatchType, boostPatch(v)), "the boost controller writes %s", v)
	}
	byPolicy := func(err error) bool {
		return err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
	}
	err := dryPatch(sa, out, types.MergePatchType, boostPatch(`"10"`))
	assert.True(t, byPolicy(err), "the boost outside injected namespaces must be refused, got %v", err)
	if err != nil {
		assert.Contains(t, err.Error(), "only in namespaces trainguard injects")
	}
	for what, patch := range map[string]string{
		"a boost over the bound":       boostPatch(`"10000000"`),
		"a negative boost":             boostPatch(`"-1000"`),
		"a boost that is not a number": boostPatch(`"1e9"`),
		"its priority":                 `{"spec":{"priority":1000000}}`,
		"its queue":                    `{"spec":{"queueName":"other"}}`,
		"deactivating it":              `{"spec":{"active":false}}`,
		"a label":                      `{"metadata":{"labels":{"kueue.x-k8s.io/queue-name":"other"}}}`,
		"another annotation":           `{"metadata":{"annotations":{"example.com/team":"b"}}}`,
		"removing another annotation":  `{"metadata":{"annotations":{"example.com/team":null}}}`,
		"a finalizer":                  `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"the boost and its priority":   `{"metadata":{"annotations":{"kueue.x-k8s.io/priority-boost":"1"}},"spec":{"priority":1000000}}`,
	} {
		err := dryPatch(sa, in, types.MergePatchType, patch)
		assert.True(t, byPolicy(err), "%s must be refused by the fence, got %v", what, err)
	}
	// Create, delete and the status subresource: RBAC (the first fence)
	// grants none of them; the policy matches them too.
	fresh := &unstructured.Unstructured{}
	require.NoError(t, fresh.UnmarshalJSON(workloadIn(t, pod.Namespace)))
	fresh.SetName("fenceboost-new")
	err = sa.Create(context.Background(), fresh, client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "creating a Workload, got %v", err)
	err = sa.Delete(context.Background(), in.DeepCopy(), client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "deleting a Workload, got %v", err)
	err = sa.Status().Patch(context.Background(), in.DeepCopy(), client.RawPatch(types.MergePatchType,
		[]byte(`{"status":{"conditions":[{"type":"Evicted","status":"True","reason":"x","message":"x","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)), client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "evicting a Workload through its status, got %v", err)
}
