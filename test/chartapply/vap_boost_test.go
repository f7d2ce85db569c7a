package chartapply

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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

func workloadIn(ns, name string) []byte {
	return []byte(`{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"Workload","metadata":{"namespace":"` + ns +
		`","name":"` + name + `","annotations":{"example.com/team":"a"}},"spec":{"queueName":"training","podSets":[{"name":"main","count":1,` +
		`"template":{"spec":{"containers":[{"name":"pytorch","image":"registry.example/train:1"}]}}}]}}`)
}

// setConditions writes a Workload's status conditions as Kueue would
// (type: status), as the cluster admin.
func setConditions(t *testing.T, wl *unstructured.Unstructured, conds map[string]string) {
	t.Helper()
	var items []string
	for typ, status := range conds {
		items = append(items, fmt.Sprintf(`{"type":%q,"status":%q,"reason":"Test","message":"test","lastTransitionTime":"2026-01-01T00:00:00Z"}`, typ, status))
	}
	patch := `{"status":{"conditions":[` + strings.Join(items, ",") + `]}}`
	require.NoError(t, apiServer.c.Status().Patch(context.Background(), wl, client.RawPatch(types.MergePatchType, []byte(patch))))
}

// admittedWorkload creates a Workload in ns that Kueue admitted.
func admittedWorkload(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	wl := job(t, workloadIn(ns, name))
	setConditions(t, wl, map[string]string{"QuotaReserved": "False", "Admitted": "True"})
	return wl
}

// trainguard's ServiceAccount may write on a Kueue Workload only
// the kueue.x-k8s.io/priority-boost annotation, from 0 to the configuration's
// maxBoost (the bound the binary is given, not a fixed 9999999: with the
// default 100, a token could boost a job past every class up to 9999999
// above its own), above 0 only on a Workload Kueue admitted, and only in
// namespaces trainguard injects. A stolen token can neither raise a job
// past that bound (and the Workload's spec.priority untouched), nor boost a
// pending Workload to preempt an admitted job of its class, nor requeue,
// suspend or reshape a Workload, nor touch any other tenant's.
func TestAdmissionPolicyFencesWorkloads(t *testing.T) {
	ctx := context.Background()
	const release, ns, policy = "fenceboost", "fenceboost-system", "fenceboost-trainguard-fence"
	sa := installFence(t, release, ns, "config.priorityBoost.enabled=true", "config.priorityBoost.maxBoost=250")
	pod := tenantNamespace(t, "fenceboost-in", optIn("enabled"))
	waitPolicyActive(t, sa, podIn(t, ns), policy)
	ensureNamespace(t, ctx, "fenceboost-out")

	in := admittedWorkload(t, pod.Namespace, "fenceboost")
	out := admittedWorkload(t, "fenceboost-out", "fenceboost")

	for _, v := range []string{`"0"`, `"49"`, `"250"`, `null`} {
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
		"a boost over config.priorityBoost.maxBoost": boostPatch(`"251"`),
		"the bound the fence had before":             boostPatch(`"9999999"`),
		"a boost over 7 digits":                      boostPatch(`"10000000"`),
		"a negative boost":                           boostPatch(`"-1000"`),
		"a boost that is not a number":               boostPatch(`"1e9"`),
		"its priority":                               `{"spec":{"priority":1000000}}`,
		"its queue":                                  `{"spec":{"queueName":"other"}}`,
		"deactivating it":                            `{"spec":{"active":false}}`,
		"a label":                                    `{"metadata":{"labels":{"kueue.x-k8s.io/queue-name":"other"}}}`,
		"another annotation":                         `{"metadata":{"annotations":{"example.com/team":"b"}}}`,
		"removing another annotation":                `{"metadata":{"annotations":{"example.com/team":null}}}`,
		"a finalizer":                                `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"the boost and its priority":                 `{"metadata":{"annotations":{"kueue.x-k8s.io/priority-boost":"1"}},"spec":{"priority":1000000}}`,
	} {
		err := dryPatch(sa, in, types.MergePatchType, patch)
		assert.True(t, byPolicy(err), "%s must be refused by the fence, got %v", what, err)
		if err != nil && strings.HasPrefix(what, "a boost over") {
			assert.Contains(t, err.Error(), "to an integer from 0 to 250 (config.priorityBoost.maxBoost)")
		}
	}

	// A Workload Kueue does not admit (pending, evicted, finished,
	// deactivated) may lose its boost, never get one.
	pending := job(t, workloadIn(pod.Namespace, "fenceboost-pending"))
	evicted := admittedWorkload(t, pod.Namespace, "fenceboost-evicted")
	setConditions(t, evicted, map[string]string{"Admitted": "True", "Evicted": "True"})
	finished := admittedWorkload(t, pod.Namespace, "fenceboost-finished")
	setConditions(t, finished, map[string]string{"Admitted": "True", "Finished": "True"})
	deactivated := admittedWorkload(t, pod.Namespace, "fenceboost-deactivated")
	require.NoError(t, apiServer.c.Patch(ctx, deactivated, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"active":false}}`))))
	for what, wl := range map[string]*unstructured.Unstructured{"pending": pending, "evicted": evicted, "finished": finished, "deactivated": deactivated} {
		err := dryPatch(sa, wl, types.MergePatchType, boostPatch(`"49"`))
		assert.True(t, byPolicy(err), "boosting a %s Workload must be refused, got %v", what, err)
		if err != nil {
			assert.Contains(t, err.Error(), "may boost only a Workload Kueue admitted", what)
		}
		for _, v := range []string{`"0"`, `null`} {
			assert.NoError(t, dryPatch(sa, wl, types.MergePatchType, boostPatch(v)), "the controller removes the boost of a %s Workload (%s)", what, v)
		}
	}

	// Create, delete and the status subresource: RBAC (the first fence)
	// grants none of them; the policy matches them too.
	fresh := &unstructured.Unstructured{}
	require.NoError(t, fresh.UnmarshalJSON(workloadIn(pod.Namespace, "fenceboost-new")))
	err = sa.Create(ctx, fresh, client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "creating a Workload, got %v", err)
	err = sa.Delete(ctx, in.DeepCopy(), client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "deleting a Workload, got %v", err)
	err = sa.Status().Patch(ctx, in.DeepCopy(), client.RawPatch(types.MergePatchType,
		[]byte(`{"status":{"conditions":[{"type":"Evicted","status":"True","reason":"x","message":"x","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)), client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "evicting a Workload through its status, got %v", err)
}

// With config.priorityBoost.enabled=false (the default) trainguard writes
// no Workload: RBAC grants no patch, and the fence refuses every Workload
// write, the boost included, should a wider grant ever give one. Before,
// the patch was granted and the fence let the token boost any admitted
// Workload of an injected namespace although the binary never would.
func TestAdmissionPolicyRefusesWorkloadWritesWithTheBoostOff(t *testing.T) {
	ctx := context.Background()
	const release, ns, policy = "fenceboostoff", "fenceboostoff-system", "fenceboostoff-trainguard-fence"
	sa := installFence(t, release, ns)
	pod := tenantNamespace(t, "fenceboostoff-in", optIn("enabled"))
	waitPolicyActive(t, sa, podIn(t, ns), policy)
	in := admittedWorkload(t, pod.Namespace, "fenceboostoff")

	assert.NoError(t, sa.Get(ctx, client.ObjectKeyFromObject(in), in.DeepCopy()), "the boost controller still reads Workloads (the work at risk)")
	err := dryPatch(sa, in, types.MergePatchType, boostPatch(`"49"`))
	assert.True(t, apierrors.IsForbidden(err) && !strings.Contains(err.Error(), policy), "RBAC grants no Workload patch with the boost off, got %v", err)

	grantCarelessly(t, release+"-careless-workloads", release, ns, []rbacv1.PolicyRule{{
		APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads", "workloads/status"}, Verbs: []string{"get", "create", "update", "patch", "delete"},
	}}, authorizationv1.ResourceAttributes{Verb: "patch", Group: "kueue.x-k8s.io", Resource: "workloads", Namespace: pod.Namespace})
	for _, v := range []string{`"0"`, `"49"`, `null`} {
		err := dryPatch(sa, in, types.MergePatchType, boostPatch(v))
		assert.True(t, byPolicy(err, policy), "with wider RBAC, the boost %s must be refused by the fence, got %v", v, err)
		if err != nil {
			assert.Contains(t, err.Error(), "writes no Kueue Workload with config.priorityBoost.enabled=false")
		}
	}
	fresh := &unstructured.Unstructured{}
	require.NoError(t, fresh.UnmarshalJSON(workloadIn(pod.Namespace, "fenceboostoff-new")))
	err = sa.Create(ctx, fresh, client.DryRunAll)
	assert.True(t, byPolicy(err, policy), "with wider RBAC, creating a Workload must be refused by the fence, got %v", err)
	err = sa.Delete(ctx, in.DeepCopy(), client.DryRunAll)
	assert.True(t, byPolicy(err, policy), "with wider RBAC, deleting a Workload must be refused by the fence, got %v", err)
}
