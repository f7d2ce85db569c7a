package chart

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/webhook"
)

// TestChartKindsAreBuiltin holds the chart's one kind list (_helpers.tpl's
// trainguard.jobKinds), as rendered by helm, to jobs.Builtin(): every kind
// the binary serves has its validating entries, a mutating entry exactly
// when it is injected at its own admission, and, when it owns pods (its
// owner chain ends at itself: the rescheduler marks it at the cap), RBAC
// get and patch and the fence over its writes; the chart names no kind the
// binary does not serve.
func TestChartKindsAreBuiltin(t *testing.T) {
	objs, mwc, vwc := renderWithTrainer(t)

	// What the chart renders, by endpoint path: the resources its rules name.
	mutating, validating := map[string][]string{}, map[string][]string{}
	for _, w := range mwc.Webhooks {
		for _, r := range w.Rules {
			mutating[*w.ClientConfig.Service.Path] = append(mutating[*w.ClientConfig.Service.Path], resourcesOf(r.APIGroups, r.Resources)...)
		}
	}
	for _, w := range vwc.Webhooks {
		for _, r := range w.Rules {
			validating[*w.ClientConfig.Service.Path] = append(validating[*w.ClientConfig.Service.Path], resourcesOf(r.APIGroups, r.Resources)...)
		}
	}
	var rules []rbacv1.PolicyRule
	for _, name := range []string{"trainguard", "trainguard-trainer"} {
		o, err := Find(objs, "ClusterRole", name)
		require.NoError(t, err)
		var cr rbacv1.ClusterRole
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cr))
		rules = append(rules, cr.Rules...)
	}
	fence := fencedWrites(t, objs)

	served := map[string]bool{webhook.PathMutatePod: true, webhook.PathValidatePod: true,
		webhook.PathMutateNamespace: true, webhook.PathValidateNamespace: true}
	for _, a := range jobs.Builtin().All() {
		gvk := a.GVK
		if a.Pod != nil { // served at the fixed pod paths
			continue
		}
		res := gvk.Group + "/" + strings.ToLower(gvk.Kind) + "s"
		mPath, vPath := webhook.MutatePath(gvk), webhook.ValidatePath(gvk)
		served[mPath], served[vPath] = true, true
		t.Run(a.Name+" "+gvk.Group, func(t *testing.T) {
			assert.Contains(t, validating[vPath], res, "validating entries of %s", jobs.String(gvk))
			if injectedAtAdmission(t, a) {
				assert.Equal(t, []string{res}, mutating[mPath], "a mutating entry: its templates are injected")
			} else {
				assert.NotContains(t, mutating, mPath, "never mutated: no mutating entry")
			}
			if !ownsItsPods(a) {
				return
			}
			group, resource, _ := strings.Cut(res, "/")
			assert.Subset(t, verbsOf(rules, group, resource), []string{"get", "patch"}, "the rescheduler reads and marks its jobs")
			assert.Subset(t, fence[res], []string{"CREATE", "UPDATE", "DELETE"}, "the fence covers every write of its jobs")
		})
	}
	for path := range mutating {
		assert.True(t, served[path], "the chart sends %s, which the binary does not serve", path)
	}
	for path := range validating {
		assert.True(t, served[path], "the chart sends %s, which the binary does not serve", path)
	}
}

func resourcesOf(groups, resources []string) []string {
	var out []string
	for _, g := range groups {
		for _, r := range resources {
			out = append(out, g+"/"+r)
		}
	}
	return out
}

// injectedAtAdmission: a kind's object is mutated, not left to its pods
// (jobs.Adapter.NotMutated), as a minimal object of it decodes.
func injectedAtAdmission(t *testing.T, a *jobs.Adapter) bool {
	t.Helper()
	job, err := a.Decode([]byte(`{"apiVersion":"` + a.GVK.GroupVersion().String() + `","kind":"` + a.GVK.Kind + `","metadata":{"name":"x"}}`))
	require.NoError(t, err)
	return a.NotMutated == nil || a.NotMutated(job) == ""
}

// ownsItsPods: the kind's owner chain ends at the kind itself (a pod's
// controller, directly or through hops, is one of its objects).
func ownsItsPods(a *jobs.Adapter) bool {
	return len(a.PodOwnerChain) > 0 && a.PodOwnerChain[len(a.PodOwnerChain)-1] == a.GVK
}

func verbsOf(rules []rbacv1.PolicyRule, group, resource string) []string {
	var out []string
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && len(r.ResourceNames) == 0 {
			out = append(out, r.Verbs...)
		}
	}
	return out
}

// fencedWrites are the operations the ValidatingAdmissionPolicy matches, by
// group/resource.
func fencedWrites(t *testing.T, objs []*unstructured.Unstructured) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range objs {
		if o.GetKind() != "ValidatingAdmissionPolicy" || !strings.HasSuffix(o.GetName(), "-fence") {
			continue
		}
		rules, _, err := unstructured.NestedSlice(o.Object, "spec", "matchConstraints", "resourceRules")
		require.NoError(t, err)
		for _, r := range rules {
			m := r.(map[string]any)
			for _, g := range m["apiGroups"].([]any) {
				for _, res := range m["resources"].([]any) {
					for _, op := range m["operations"].([]any) {
						k := schema.GroupResource{Group: g.(string), Resource: res.(string)}
						out[k.Group+"/"+k.Resource] = append(out[k.Group+"/"+k.Resource], op.(string))
					}
				}
			}
		}
	}
	require.NotEmpty(t, out, "no fence rendered")
	return out
}
