package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/version"
)

// TestChartNeverRendersLatest: no image, tag or default in any rendered
// mode names a moving tag, and the chart's appVersion is the release the
// binary pins its own defaults to.
func TestChartNeverRendersLatest(t *testing.T) {
	helm, dir := helmAndChart(t)
	for _, tc := range cases() {
		args := []string{"template", tc.release, dir, "--namespace", tc.namespace, "--kube-version", KubeVersion}
		for _, v := range tc.set {
			args = append(args, "--set", v)
		}
		out, err := runHelm(helm, args...)
		require.NoError(t, err)
		assert.NotContains(t, strings.ToLower(string(out)), "latest", tc.name)
		assert.Contains(t, string(out), version.Image, "%s: the chart deploys (and injects) this release's image", tc.name)
	}
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	require.NoError(t, err)
	var meta struct{ AppVersion string }
	require.NoError(t, yaml.Unmarshal(data, &meta))
	assert.Equal(t, version.AppVersion, meta.AppVersion, "internal/foundations/version.AppVersion must follow the chart's appVersion")
}

func TestChartDefaultsForACriticalWebhook(t *testing.T) {
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system")
	require.NoError(t, err)
	d := deployment(t, objs, renderCase{fullname: "trainguard"})
	pod := d.Spec.Template.Spec
	assert.Equal(t, "system-cluster-critical", pod.PriorityClassName)

	// Two replicas must land on two nodes whenever two exist.
	require.Len(t, pod.TopologySpreadConstraints, 1)
	spread := pod.TopologySpreadConstraints[0]
	assert.Equal(t, "kubernetes.io/hostname", spread.TopologyKey)
	assert.Equal(t, corev1.DoNotSchedule, spread.WhenUnsatisfiable)
	assert.Equal(t, int32(1), spread.MaxSkew)
	sel, err := metav1.LabelSelectorAsSelector(spread.LabelSelector)
	require.NoError(t, err)
	assert.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)))

	// The GC knows the container's memory limit.
	var memLimit *corev1.EnvVar
	for i := range pod.Containers[0].Env {
		if pod.Containers[0].Env[i].Name == "GOMEMLIMIT" {
			memLimit = &pod.Containers[0].Env[i]
		}
	}
	require.NotNil(t, memLimit, "GOMEMLIMIT from the container's memory limit")
	require.NotNil(t, memLimit.ValueFrom.ResourceFieldRef)
	assert.Equal(t, "limits.memory", memLimit.ValueFrom.ResourceFieldRef.Resource)
	assert.Equal(t, "trainguard", memLimit.ValueFrom.ResourceFieldRef.ContainerName)

	// Metrics: HTTPS with authn/authz, and the RBAC that needs.
	assert.Contains(t, pod.Containers[0].Args, "--metrics-secure=true")
	svc := &corev1.Service{}
	o, err := Find(objs, "Service", "trainguard")
	require.NoError(t, err)
	require.NoError(t, Into(o, svc))
	var names []string
	for _, p := range svc.Spec.Ports {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"webhook", "https-metrics"}, names)
	checkMetricsRBAC(t, objs)

	// NetworkPolicy: webhook from anywhere, nothing else by default.
	o, err = Find(objs, "NetworkPolicy", "trainguard")
	require.NoError(t, err)
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, Into(o, np))
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
	npSel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	require.NoError(t, err)
	assert.True(t, npSel.Matches(labels.Set(d.Spec.Template.Labels)), "the policy selects trainguard's pods")
	require.Len(t, np.Spec.Ingress, 1, "metrics and probes are closed unless values name who may reach them")
	assert.Empty(t, np.Spec.Ingress[0].From, "the API server may come from anywhere")
	require.Len(t, np.Spec.Ingress[0].Ports, 1)
	assert.Equal(t, "webhook", np.Spec.Ingress[0].Ports[0].Port.String())
}

func checkMetricsRBAC(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	o, err := Find(objs, "ClusterRole", "trainguard-metrics-auth")
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{}
	require.NoError(t, Into(o, role))
	assert.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}, role.Rules)
	o, err = Find(objs, "ClusterRoleBinding", "trainguard-metrics-auth")
	require.NoError(t, err)
	binding := &rbacv1.ClusterRoleBinding{}
	require.NoError(t, Into(o, binding))
	assert.Equal(t, "trainguard-metrics-auth", binding.RoleRef.Name)
	require.Len(t, binding.Subjects, 1)
	assert.Equal(t, rbacv1.Subject{Kind: "ServiceAccount", Name: "trainguard", Namespace: "trainguard-system"}, binding.Subjects[0])
	o, err = Find(objs, "ClusterRole", "trainguard-metrics-reader")
	require.NoError(t, err)
	reader := &rbacv1.ClusterRole{}
	require.NoError(t, Into(o, reader))
	assert.Equal(t, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, reader.Rules)
}

func TestChartSwitchesForNetworkPolicyMetricsAndSpread(t *testing.T) {
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system",
		"networkPolicy.enabled=false", "metrics.secure=false", "replicaCount=1")
	require.NoError(t, err)
	assert.Empty(t, OfKind(objs, "NetworkPolicy"))
	_, err = Find(objs, "ClusterRole", "trainguard-metrics-auth")
	assert.Error(t, err, "plain-HTTP metrics need no TokenReview rights")
	d := deployment(t, objs, renderCase{fullname: "trainguard"})
	assert.Contains(t, d.Spec.Template.Spec.Containers[0].Args, "--metrics-secure=false")
	assert.Empty(t, d.Spec.Template.Spec.TopologySpreadConstraints, "one replica has nothing to spread")

	objs, err = Render(helm, dir, "trainguard", "trainguard-system", "priorityClassName=")
	require.NoError(t, err)
	assert.Empty(t, deployment(t, objs, renderCase{fullname: "trainguard"}).Spec.Template.Spec.PriorityClassName)
}

// TestChartUpdatesFailOpen: every entry that sees UPDATEs fails open and
// carries a matchCondition, so trainguard down never wedges an update; the
// CREATE entries keep the configured (fail-closed) policy. Rendered with
// Trainer on, so its TrainJob and TrainingRuntime entries are judged too
// (their UPDATEs once failed closed: Kueue's suspend and finalizer
// removals waited on trainguard).
func TestChartUpdatesFailOpen(t *testing.T) {
	_, m, v := renderWithTrainer(t)
	conditions := map[string][]admissionregistrationv1.MatchCondition{}
	for _, w := range m.Webhooks {
		conditions[w.Name] = w.MatchConditions
	}
	for _, w := range v.Webhooks {
		conditions[w.Name] = w.MatchConditions
		for _, r := range w.Rules {
			for _, op := range r.Operations {
				if op == admissionregistrationv1.Update {
					assert.Equal(t, admissionregistrationv1.Ignore, *w.FailurePolicy, w.Name)
					assert.NotEmpty(t, w.MatchConditions, w.Name)
				}
			}
		}
	}
	for _, name := range []string{"trainjobs.validate.trainguard.io", "trainingruntimes.validate.trainguard.io"} {
		w := validatingEntry(t, v, name)
		assert.Equal(t, admissionregistrationv1.Fail, *w.FailurePolicy, "%s: a TrainJob must not start unchecked", name)
		assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, w.Rules[0].Operations, name)
	}
	for _, name := range []string{"namespaces.mutate.trainguard.io", "pod-updates.validate.trainguard.io",
		"pytorchjobs-updates.validate.trainguard.io", "namespaces.validate.trainguard.io",
		"trainjobs-updates.validate.trainguard.io", "trainingruntimes-updates.validate.trainguard.io",
		"clustertrainingruntimes.validate.trainguard.io"} {
		assert.NotEmpty(t, conditions[name], "%s spares calls with matchConditions", name)
	}
	// Pod CREATE entries carry none by default: the CEL conversion would cost
	// every training pod (see webhook.podMatchConditions).
	assert.Empty(t, conditions["pods.mutate.trainguard.io"])
	assert.Empty(t, conditions["pods.validate.trainguard.io"])

	// Switched on, they do, and the training container names come from the
	// values, like the Go code's.
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system", "webhook.podMatchConditions=true", "config.trainingContainer.names={trainer}")
	require.NoError(t, err)
	m, v, err = WebhookConfigurations(objs)
	require.NoError(t, err)
	for _, w := range m.Webhooks {
		if w.Name == "pods.mutate.trainguard.io" {
			require.Len(t, w.MatchConditions, 1)
			assert.Contains(t, w.MatchConditions[0].Expression, "c.name in ['trainer']")
		}
	}
	for _, w := range v.Webhooks {
		if w.Name == "pods.validate.trainguard.io" {
			assert.Len(t, w.MatchConditions, 1)
		}
	}
}

// validatingEntry returns the validating webhook entry called name.
func validatingEntry(t *testing.T, v *admissionregistrationv1.ValidatingWebhookConfiguration, name string) *admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	for i := range v.Webhooks {
		if v.Webhooks[i].Name == name {
			return &v.Webhooks[i]
		}
	}
	require.Failf(t, "no such webhook entry", "%s", name)
	return nil
}

// renderWithTrainer renders the chart's defaults with Trainer's kinds on
// and returns its objects and webhook configurations.
func renderWithTrainer(t *testing.T) ([]*unstructured.Unstructured, *admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system", "trainer.enabled=true")
	require.NoError(t, err)
	m, v, err := WebhookConfigurations(objs)
	require.NoError(t, err)
	return objs, m, v
}
