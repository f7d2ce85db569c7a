package chartapply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fenceModes are the four combinations the policy items are tested in:
// both certificate modes, both opt-in modes. Each has its own release, so
// its own ServiceAccount and policy on the shared API server.
func fenceModes(prefix string) []struct {
	name, release string
	set           []string
	clusterWide   bool
} {
	return []struct {
		name, release string
		set           []string
		clusterWide   bool
	}{
		{name: "cert-manager, opt-in", release: prefix},
		{name: "cert-manager, cluster-wide", release: prefix + "cw", set: []string{"clusterWide=true"}, clusterWide: true},
		{name: "self-managed, opt-in", release: prefix + "sm", set: []string{"certManager.enabled=false"}},
		{name: "self-managed, cluster-wide", release: prefix + "smcw", set: []string{"certManager.enabled=false", "clusterWide=true"}, clusterWide: true},
	}
}

// namespaceWithPod creates namespace name (if absent) with m, a default
// ServiceAccount and a pod "worker", as the cluster admin.
func namespaceWithPod(t *testing.T, name string, m nsMeta) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	err := apiServer.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: m.labels, Annotations: m.annotations}})
	if apierrors.IsAlreadyExists(err) {
		ns := &corev1.Namespace{}
		require.NoError(t, apiServer.c.Get(ctx, client.ObjectKey{Name: name}, ns))
		ns.Labels, ns.Annotations = m.labels, m.annotations
		require.NoError(t, apiServer.c.Update(ctx, ns))
	} else {
		require.NoError(t, err)
	}
	err = apiServer.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default"}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	pod := &corev1.Pod{}
	if err := apiServer.c.Get(ctx, client.ObjectKey{Namespace: name, Name: "worker"}, pod); err == nil {
		return pod
	}
	return podIn(t, name)
}

// Cluster-wide mode does not fence as wide as it injects. kube-* namespaces
// are never trainguard's (both opt-in modes, even annotated enabled);
// cluster-wide, the components' namespaces are excluded too; and whatever
// the namespace, a pod trainguard's account creates must carry its marker
// and may not use host namespaces, a privileged container, a hostPath volume
// or a component's ServiceAccount.
func TestAdmissionPolicyNarrowsWhatTheAccountMayCreate(t *testing.T) {
	ctx := context.Background()
	for _, m := range fenceModes("fencepod") {
		t.Run(m.name, func(t *testing.T) {
			ns, policy := m.release+"-system", m.release+"-trainguard-fence"
			sa := installFence(t, m.release, ns, m.set...)
			injected := namespaceWithPod(t, m.release+"-team", optIn("enabled"))
			waitPolicyActive(t, sa, podIn(t, ns), policy)

			// kube-* namespaces: never, even annotated enabled.
			for _, name := range []string{"kube-public", "kube-node-lease", "kube-flannel"} {
				pod := namespaceWithPod(t, name, optIn("enabled"))
				assertPodOpsRefused(t, sa, pod, policy, "a kube-* namespace")
			}
			// The components' namespaces, which cluster-wide mode injected
			// before (cert-manager's pods run as cert-manager, which reads
			// and writes Secrets cluster-wide).
			for _, name := range []string{"cert-manager", "monitoring", "kueue-system", "kubeflow", "kubeflow-system", "jobset-system"} {
				pod := namespaceWithPod(t, name, nsMeta{})
				if m.clusterWide {
					assertPodOpsRefused(t, sa, pod, policy, "a component's namespace, excluded in cluster-wide mode")
				} else {
					assertPodOpsRefused(t, sa, pod, policy, "never opted in")
				}
			}

			// In a namespace trainguard injects: the replacement of a bare pod
			// it injected passes, and nothing else.
			require.NoError(t, sa.Create(ctx, replacement(injected), client.DryRunAll), "the rescheduler's replacement of a bare pod")
			err := apiServer.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: injected.Namespace, Name: "cert-manager"}})
			if !apierrors.IsAlreadyExists(err) {
				require.NoError(t, err)
			}
			for what, change := range map[string]func(p *corev1.Pod){
				"no marker": func(p *corev1.Pod) { p.Labels, p.Annotations = nil, nil },
				"no managed label": func(p *corev1.Pod) {
					p.Labels = nil
				},
				"hostNetwork": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
				"hostPID":     func(p *corev1.Pod) { p.Spec.HostPID = true },
				"hostIPC":     func(p *corev1.Pod) { p.Spec.HostIPC = true },
				"a privileged container": func(p *corev1.Pod) {
					p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
				},
				"a privileged init container": func(p *corev1.Pod) {
					p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "example.com/setup:1",
						SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
				},
				"a hostPath volume": func(p *corev1.Pod) {
					p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
				},
				"cert-manager's ServiceAccount": func(p *corev1.Pod) { p.Spec.ServiceAccountName = "cert-manager" },
			} {
				p := replacement(injected)
				change(p)
				err := sa.Create(ctx, p, client.DryRunAll)
				assert.True(t, refusedByPolicy(err, policy), "a pod with %s must be refused, got %v", what, err)
				if err != nil {
					assert.Contains(t, err.Error(), policy, what)
				}
				// The cluster admin may: the policy fences trainguard's account only.
				assert.NoError(t, apiServer.c.Create(ctx, p.DeepCopy(), client.DryRunAll), "the admin's pod with %s", what)
			}
		})
	}
}
