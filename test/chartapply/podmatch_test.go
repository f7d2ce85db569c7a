package chartapply

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/test/chart"
)

// installPodMutatingEntry creates the rendered pods.mutate.trainguard.io
// entry in the real API server, unserved and failing closed: a pod its
// matchConditions send is refused naming it, a pod they skip is admitted.
// So the API server itself says which pods trainguard would see. The
// entry's namespaceSelector is narrowed to tenant, so no other test's pods
// ever meet it, even while its deletion is still propagating.
func installPodMutatingEntry(t *testing.T, release, namespace, tenant string, set ...string) {
	t.Helper()
	objs := renderChart(t, release, namespace, set...)
	m, _, err := chart.WebhookConfigurations(objs)
	require.NoError(t, err)
	var kept []admissionregistrationv1.MutatingWebhook
	for _, w := range m.Webhooks {
		if w.Name == "pods.mutate.trainguard.io" {
			require.Len(t, w.MatchConditions, 1, "rendered with webhook.podMatchConditions=true")
			require.Equal(t, admissionregistrationv1.Fail, *w.FailurePolicy)
			w.NamespaceSelector = onlyNamespace(w.NamespaceSelector, tenant)
			kept = append(kept, w)
		}
	}
	require.Len(t, kept, 1)
	m.Webhooks = kept
	require.NoError(t, apiServer.c.Create(context.Background(), m))
	t.Cleanup(func() { _ = apiServer.c.Delete(context.Background(), m) })
}

// trainerPod is a TrainJob's trainer pod as the Job controller creates it:
// JobSet's and Trainer's labels, Trainer's container name.
func trainerPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			trainerv1alpha1.LabelJobSetName: "mnist", trainerv1alpha1.LabelJobSetReplicatedJob: trainerv1alpha1.Node,
			trainerv1alpha1.LabelTrainJobAncestor: trainerv1alpha1.AncestorTrainer,
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: trainerv1alpha1.Node, Image: "example.com/train:1"}}},
	}
}

func podNamed(ns, name, container string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "example.com/train:1"}}},
	}
}

// gpuPod runs python in a container named train and asks for res.
func gpuPod(ns, name, res string) *corev1.Pod {
	pod := podNamed(ns, name, "train", nil)
	pod.Spec.Containers[0].Command = []string{"python", "train.py"}
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}
	return pod
}

// sentToTrainguard dry-runs the pod's creation and says whether the API
// server sent it to the (unserved) pod webhook.
func sentToTrainguard(t *testing.T, pod *corev1.Pod) bool {
	t.Helper()
	err := apiServer.c.Create(context.Background(), pod, client.DryRunAll)
	if err == nil {
		return false
	}
	require.Contains(t, err.Error(), "pods.mutate.trainguard.io", "only the webhook may refuse %s", pod.Name)
	return true
}

// Issue 24, item 11: with webhook.podMatchConditions=true the API server
// must still send trainguard every pod the Go code injects: a TrainJob's
// trainer pod (container node, which the CEL did not know) and a pod that
// asks for trainguard with a policy annotation. The names come from the
// values, as the Go code's configuration does.
func TestPodMatchConditionsSendEveryInjectablePod(t *testing.T) {
	const release, ns = "podmatch", "podmatch-system"
	tenant := "podmatch-in"
	tenantNamespace(t, tenant, optIn("enabled"))
	installPodMutatingEntry(t, release, ns, tenant, "webhook.podMatchConditions=true")
	require.Eventually(t, func() bool {
		err := apiServer.c.Create(context.Background(), podNamed(tenant, "probe", "pytorch", nil), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "pods.mutate.trainguard.io")
	}, 30*time.Second, 100*time.Millisecond, "the pod webhook entry is in force")

	for name, pod := range map[string]*corev1.Pod{
		"a TrainJob's trainer pod (container node)": trainerPod(tenant, "trainer"),
		"a pytorch container":                       podNamed(tenant, "pytorch", "pytorch", nil),
		"an ascend container":                       podNamed(tenant, "ascend", "ascend", nil),
		"opted in by annotation":                    podNamed(tenant, "asked", "main", map[string]string{"trainguard.io/inject": "enabled"}),
		"a trainguard policy annotation":            podNamed(tenant, "policy", "main", map[string]string{"trainguard.io/gpu-limit": "2"}),
		"a GPU pod (python decided in Go)":          gpuPod(tenant, "gpu", "nvidia.com/gpu"),
		"another vendor's accelerator":              gpuPod(tenant, "neuron", "aws.amazon.com/neuroncore"),
	} {
		assert.True(t, sentToTrainguard(t, pod), "%s must be sent to trainguard", name)
	}
	opted := trainerPod(tenant, "opted-out")
	opted.Annotations = map[string]string{"trainguard.io/inject": "disabled"}
	for name, pod := range map[string]*corev1.Pod{
		"a pod with no training container":        podNamed(tenant, "sidecar", "sidecar", nil),
		"a container named node outside a JobSet": podNamed(tenant, "node", trainerv1alpha1.Node, nil),
		"an opted-out trainer pod":                opted,
	} {
		assert.False(t, sentToTrainguard(t, pod), "%s is not trainguard's: the API server keeps it", name)
	}
}

// The configured names are the ones the API server matches on.
func TestPodMatchConditionsFollowTheConfiguredNames(t *testing.T) {
	const release, ns = "podnames", "podnames-system"
	tenant := "podnames-in"
	tenantNamespace(t, tenant, optIn("enabled"))
	installPodMutatingEntry(t, release, ns, tenant, "webhook.podMatchConditions=true", "config.trainingContainer.names={trainer}")
	require.Eventually(t, func() bool {
		err := apiServer.c.Create(context.Background(), podNamed(tenant, "probe", "trainer", nil), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "pods.mutate.trainguard.io")
	}, 30*time.Second, 100*time.Millisecond, "a container named as configured is sent")
	assert.False(t, sentToTrainguard(t, podNamed(tenant, "pytorch", "pytorch", nil)), "pytorch is no longer a training name")
	assert.True(t, sentToTrainguard(t, trainerPod(tenant, "trainer")), "Trainer's node is added whatever the names")
}

// onlyNamespace narrows a rendered namespaceSelector to one namespace.
func onlyNamespace(sel *metav1.LabelSelector, name string) *metav1.LabelSelector {
	out := sel.DeepCopy()
	out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{name},
	})
	return out
}
