package chart

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/version"
)

// renderCase is one combination of values the acceptance criteria name.
type renderCase struct {
	name, release, namespace string
	set                      []string
	// derived expectations
	fullname       string
	certManager    bool
	customIssuer   *cmmeta.IssuerReference
	clusterWide    bool
	rescheduler    bool
	extraExcluded  []string
	workloadPolicy admissionregistrationv1.FailurePolicyType
	boost          bool // config.priorityBoost.enabled
}

func cases() []renderCase {
	return []renderCase{
		{name: "defaults", release: "trainguard", namespace: "trainguard-system",
			fullname: "trainguard", certManager: true, rescheduler: true, workloadPolicy: admissionregistrationv1.Fail},
		{name: "self-managed certificates", release: "trainguard", namespace: "trainguard-system",
			set:      []string{"certManager.enabled=false"},
			fullname: "trainguard", rescheduler: true, workloadPolicy: admissionregistrationv1.Fail},
		{name: "cluster-wide", release: "trainguard", namespace: "trainguard-system",
			set:      []string{"clusterWide=true"},
			fullname: "trainguard", certManager: true, clusterWide: true, rescheduler: true, workloadPolicy: admissionregistrationv1.Ignore},
		{name: "cluster-wide failing closed", release: "trainguard", namespace: "trainguard-system",
			set:      []string{"clusterWide=true", "webhook.clusterWideFailurePolicy=Fail"},
			fullname: "trainguard", certManager: true, clusterWide: true, rescheduler: true, workloadPolicy: admissionregistrationv1.Fail},
		{name: "audit mode fails open", release: "trainguard", namespace: "trainguard-system",
			set:      []string{"config.admissionMode=audit"},
			fullname: "trainguard", certManager: true, rescheduler: true, workloadPolicy: admissionregistrationv1.Ignore},
		{name: "custom issuer", release: "trainguard", namespace: "trainguard-system",
			set:      []string{"certManager.issuerRef.name=corp-ca", "certManager.issuerRef.kind=ClusterIssuer"},
			fullname: "trainguard", certManager: true, rescheduler: true, workloadPolicy: admissionregistrationv1.Fail,
			customIssuer: &cmmeta.IssuerReference{Name: "corp-ca", Kind: "ClusterIssuer", Group: "cert-manager.io"}},
		{name: "custom namespace and release", release: "tg", namespace: "ml-platform",
			set:      []string{"excludedNamespaces={monitoring,istio-system}", "webhook.failurePolicy=Ignore"},
			fullname: "tg-trainguard", certManager: true, rescheduler: true, workloadPolicy: admissionregistrationv1.Ignore,
			extraExcluded: []string{"monitoring", "istio-system"}},
		{name: "rescheduler disabled, self-managed", release: "trainguard", namespace: "trainguard-system",
			set:      []string{"rescheduler.enabled=false", "certManager.enabled=false"},
			fullname: "trainguard", workloadPolicy: admissionregistrationv1.Fail},
		{name: "priority boost", release: "trainguard", namespace: "trainguard-system",
			set:      []string{"config.priorityBoost.enabled=true", "config.priorityBoost.maxBoost=250"},
			fullname: "trainguard", certManager: true, rescheduler: true, workloadPolicy: admissionregistrationv1.Fail, boost: true},
		{name: "priority boost, rescheduler disabled", release: "trainguard", namespace: "trainguard-system",
			set:      []string{"config.priorityBoost.enabled=true", "rescheduler.enabled=false"},
			fullname: "trainguard", certManager: true, workloadPolicy: admissionregistrationv1.Fail, boost: true},
	}
}

func helmAndChart(t *testing.T) (string, string) {
	t.Helper()
	helm, err := HelmBin()
	require.NoError(t, err, "the chart tests need the real helm binary")
	dir, err := Dir()
	require.NoError(t, err)
	return helm, dir
}

func TestChartRendersForEveryValueCombination(t *testing.T) {
	helm, dir := helmAndChart(t)
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, Lint(helm, dir, tc.namespace, tc.set...))
			objs, err := Render(helm, dir, tc.release, tc.namespace, tc.set...)
			require.NoError(t, err)
			checkStrictAndNamespaced(t, objs, tc)
			checkWebhooks(t, objs, tc)
			checkCertificates(t, objs, tc)
			checkDeployment(t, objs, tc)
			checkPDBAndService(t, objs, tc)
			checkRBAC(t, objs, tc)
			checkFenceOwnState(t, objs)
			checkConfig(t, objs, tc)
		})
	}
}

// typedFor lists every kind the chart may render, so a new kind without a
// strict decode here fails the test.
func typedFor(kind string) any {
	switch kind {
	case "Deployment":
		return &appsv1.Deployment{}
	case "Service":
		return &corev1.Service{}
	case "ServiceAccount":
		return &corev1.ServiceAccount{}
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "ClusterRole":
		return &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	case "Role":
		return &rbacv1.Role{}
	case "RoleBinding":
		return &rbacv1.RoleBinding{}
	case "MutatingWebhookConfiguration":
		return &admissionregistrationv1.MutatingWebhookConfiguration{}
	case "ValidatingWebhookConfiguration":
		return &admissionregistrationv1.ValidatingWebhookConfiguration{}
	case "ValidatingAdmissionPolicy":
		return &admissionregistrationv1.ValidatingAdmissionPolicy{}
	case "ValidatingAdmissionPolicyBinding":
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	case "Issuer":
		return &cmapi.Issuer{}
	case "Certificate":
		return &cmapi.Certificate{}
	case "NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	}
	return nil
}

var clusterScoped = []string{"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

func checkStrictAndNamespaced(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) {
	t.Helper()
	require.NotEmpty(t, objs)
	for _, o := range objs {
		typed := typedFor(o.GetKind())
		require.NotNil(t, typed, "rendered kind %s has no strict decode in this test", o.GetKind())
		assert.NoError(t, Into(o, typed))
		switch {
		case slices.Contains(clusterScoped, o.GetKind()):
			assert.Empty(t, o.GetNamespace(), "%s %s is cluster-scoped", o.GetKind(), o.GetName())
		case o.GetNamespace() == corev1.NamespaceNodeLease:
			checkNodeLeaseRole(t, o, tc)
		default:
			assert.Equal(t, tc.namespace, o.GetNamespace(), "%s %s must live in the release namespace", o.GetKind(), o.GetName())
		}
		assert.Equal(t, tc.release, o.GetLabels()["app.kubernetes.io/instance"], "%s %s labels", o.GetKind(), o.GetName())
	}
}

// checkNodeLeaseRole: the one grant outside the release namespace is the
// rescheduler's read-only access to node Leases in kube-node-lease.
func checkNodeLeaseRole(t *testing.T, o *unstructured.Unstructured, tc renderCase) {
	t.Helper()
	assert.Equal(t, tc.fullname+"-node-leases", o.GetName(), "%s %s in kube-node-lease", o.GetKind(), o.GetName())
	switch o.GetKind() {
	case "Role":
		role := &rbacv1.Role{}
		require.NoError(t, Into(o, role))
		assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch"}}}, role.Rules, "read-only, node Leases only")
	case "RoleBinding":
	default:
		t.Errorf("%s %s must not live in kube-node-lease", o.GetKind(), o.GetName())
	}
}

func servingCertName(tc renderCase) string { return tc.fullname + "-serving-cert" }
func secretName(tc renderCase) string      { return tc.fullname + "-tls" }

var wantPaths = map[string]string{
	"pytorchjobs.mutate.trainguard.io":                  "/mutate-kubeflow-org-v1-pytorchjob",
	"kubedl-pytorchjobs.mutate.trainguard.io":           "/mutate-training-kubedl-io-v1alpha1-pytorchjob",
	"pods.mutate.trainguard.io":                         "/mutate-v1-pod",
	"namespaces.mutate.trainguard.io":                   "/mutate-v1-namespace",
	"pytorchjobs.validate.trainguard.io":                "/validate-kubeflow-org-v1-pytorchjob",
	"kubedl-pytorchjobs.validate.trainguard.io":         "/validate-training-kubedl-io-v1alpha1-pytorchjob",
	"pods.validate.trainguard.io":                       "/validate-v1-pod",
	"pytorchjobs-updates.validate.trainguard.io":        "/validate-kubeflow-org-v1-pytorchjob",
	"kubedl-pytorchjobs-updates.validate.trainguard.io": "/validate-training-kubedl-io-v1alpha1-pytorchjob",
	"pod-updates.validate.trainguard.io":                "/validate-v1-pod",
	"namespaces.validate.trainguard.io":                 "/validate-v1-namespace",
	"jobs.mutate.trainguard.io":                         "/mutate-batch-v1-job",
	"jobs.validate.trainguard.io":                       "/validate-batch-v1-job",
	"jobs-updates.validate.trainguard.io":               "/validate-batch-v1-job",
}

// webhookEntry is the part of a Mutating or Validating webhook every check needs.
type webhookEntry struct {
	config            string
	name              string
	clientConfig      admissionregistrationv1.WebhookClientConfig
	rules             []admissionregistrationv1.RuleWithOperations
	failurePolicy     *admissionregistrationv1.FailurePolicyType
	matchPolicy       *admissionregistrationv1.MatchPolicyType
	namespaceSelector *metav1.LabelSelector
	sideEffects       *admissionregistrationv1.SideEffectClass
	timeoutSeconds    *int32
	reviewVersions    []string
}

func entries(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) []webhookEntry {
	var out []webhookEntry
	for _, w := range m.Webhooks {
		out = append(out, webhookEntry{"mutating", w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.NamespaceSelector, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions})
	}
	for _, w := range v.Webhooks {
		out = append(out, webhookEntry{"validating", w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.NamespaceSelector, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions})
	}
	return out
}

func nsLabels(name string, extra map[string]string) labels.Set {
	l := labels.Set{"kubernetes.io/metadata.name": name}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// clusterWideComponents are the namespaces cluster-wide mode excludes by
// default (clusterWideExcludedNamespaces): those of the components whose
// ServiceAccounts trainguard's account must never run a pod as.
var clusterWideComponents = []string{
	"kube-public", "kube-node-lease", "cert-manager", "monitoring", "kueue-system",
	"kubeflow", "kubeflow-system", "jobset-system", "kubedl-system", "mindx-dl", "volcano-system",
}

// excludedOf is what tc's webhook selectors and policy file exclude.
func excludedOf(tc renderCase) []string {
	excluded := append([]string{"kube-system", tc.namespace}, tc.extraExcluded...)
	if tc.clusterWide {
		excluded = append(excluded, clusterWideComponents...)
	}
	return excluded
}

func checkWebhooks(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) {
	t.Helper()
	m, v, err := WebhookConfigurations(objs)
	require.NoError(t, err)
	assert.Equal(t, tc.fullname, m.Name)
	assert.Equal(t, tc.fullname, v.Name, "both configurations share one name (--webhook-config-name)")

	for _, annotations := range []map[string]string{m.Annotations, v.Annotations} {
		if tc.certManager {
			assert.Equal(t, tc.namespace+"/"+servingCertName(tc), annotations["cert-manager.io/inject-ca-from"])
		} else {
			assert.NotContains(t, annotations, "cert-manager.io/inject-ca-from")
		}
	}

	all := entries(m, v)
	require.Len(t, all, len(wantPaths))
	excluded := excludedOf(tc)
	for _, w := range all {
		t.Run(w.name, func(t *testing.T) {
			require.Contains(t, wantPaths, w.name)
			require.NotNil(t, w.clientConfig.Service)
			assert.Equal(t, wantPaths[w.name], *w.clientConfig.Service.Path)
			assert.Equal(t, tc.fullname, w.clientConfig.Service.Name)
			assert.Equal(t, tc.namespace, w.clientConfig.Service.Namespace)
			assert.Equal(t, int32(443), *w.clientConfig.Service.Port)
			assert.Empty(t, w.clientConfig.CABundle, "caBundle is injected, never rendered")
			assert.Nil(t, w.clientConfig.URL)
			assert.Equal(t, []string{"v1"}, w.reviewVersions)
			assert.Equal(t, admissionregistrationv1.Equivalent, *w.matchPolicy)
			assert.Equal(t, admissionregistrationv1.SideEffectClassNone, *w.sideEffects)
			assert.Equal(t, int32(5), *w.timeoutSeconds)

			require.NotNil(t, w.namespaceSelector)
			sel, err := metav1.LabelSelectorAsSelector(w.namespaceSelector)
			require.NoError(t, err)
			// The excluded namespaces are never matched, even opted in.
			for _, ns := range excluded {
				assert.False(t, sel.Matches(nsLabels(ns, map[string]string{"trainguard.io/inject": "enabled"})), "%s must never be sent to trainguard", ns)
			}

			isNamespaceHook := strings.HasPrefix(w.name, "namespaces.")
			if isNamespaceHook {
				assert.Equal(t, admissionregistrationv1.Ignore, *w.failurePolicy, "namespace webhooks never block namespace changes")
				assert.True(t, sel.Matches(nsLabels("team-a", nil)), "the annotation mirror must see namespaces that have not opted in yet")
				return
			}
			if strings.Contains(w.name, "updates.") {
				assert.Equal(t, admissionregistrationv1.Ignore, *w.failurePolicy, "updates never wedge while trainguard is down")
			} else {
				assert.Equal(t, tc.workloadPolicy, *w.failurePolicy)
			}
			optedIn := sel.Matches(nsLabels("team-a", map[string]string{"trainguard.io/inject": "enabled"}))
			plain := sel.Matches(nsLabels("team-b", nil))
			optedOut := sel.Matches(nsLabels("team-c", map[string]string{"trainguard.io/inject": "disabled"}))
			assert.True(t, optedIn, "opted-in namespaces are matched")
			assert.False(t, optedOut, "opted-out namespaces are never matched")
			assert.Equal(t, tc.clusterWide, plain, "namespaces without the label are matched only in cluster-wide mode")
		})
	}

	var podHook *admissionregistrationv1.MutatingWebhook
	for i := range m.Webhooks {
		if m.Webhooks[i].Name == "pods.mutate.trainguard.io" {
			podHook = &m.Webhooks[i]
		}
	}
	require.NotNil(t, podHook)
	assert.Equal(t, admissionregistrationv1.IfNeededReinvocationPolicy, *podHook.ReinvocationPolicy)
	for _, w := range all {
		for _, r := range w.rules {
			switch {
			case strings.HasPrefix(w.name, "namespaces."):
				assert.ElementsMatch(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, r.Operations, w.name)
			case strings.Contains(w.name, "updates."):
				assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, r.Operations, w.name)
			default:
				assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, r.Operations, w.name)
			}
		}
	}
}

func checkCertificates(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) {
	t.Helper()
	issuers, certs := OfKind(objs, "Issuer"), OfKind(objs, "Certificate")
	if !tc.certManager {
		assert.Empty(t, issuers)
		assert.Empty(t, certs)
		return
	}
	o, err := Find(objs, "Certificate", servingCertName(tc))
	require.NoError(t, err)
	serving := &cmapi.Certificate{}
	require.NoError(t, Into(o, serving))
	svc := tc.fullname
	assert.Equal(t, []string{svc, svc + "." + tc.namespace, svc + "." + tc.namespace + ".svc", svc + "." + tc.namespace + ".svc.cluster.local"}, serving.Spec.DNSNames)
	assert.Equal(t, secretName(tc), serving.Spec.SecretName)
	require.NotNil(t, serving.Spec.PrivateKey)
	assert.Equal(t, cmapi.RotationPolicyAlways, serving.Spec.PrivateKey.RotationPolicy)
	require.NotNil(t, serving.Spec.Duration)
	require.NotNil(t, serving.Spec.RenewBefore)
	assert.Equal(t, "2160h0m0s", serving.Spec.Duration.Duration.String())
	assert.Equal(t, "360h0m0s", serving.Spec.RenewBefore.Duration.String())
	assert.Contains(t, serving.Spec.Usages, cmapi.UsageServerAuth)

	if tc.customIssuer != nil {
		assert.Empty(t, issuers, "a user issuerRef renders no Issuer")
		assert.Len(t, certs, 1)
		assert.Equal(t, tc.customIssuer.Name, serving.Spec.IssuerRef.Name)
		assert.Equal(t, tc.customIssuer.Kind, serving.Spec.IssuerRef.Kind)
		assert.Equal(t, tc.customIssuer.Group, serving.Spec.IssuerRef.Group)
		return
	}
	// The chart's own PKI: self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate.
	require.Len(t, issuers, 2)
	require.Len(t, certs, 2)
	so, err := Find(objs, "Issuer", tc.fullname+"-selfsigned")
	require.NoError(t, err)
	selfSigned := &cmapi.Issuer{}
	require.NoError(t, Into(so, selfSigned))
	assert.NotNil(t, selfSigned.Spec.SelfSigned)

	co, err := Find(objs, "Certificate", tc.fullname+"-ca")
	require.NoError(t, err)
	ca := &cmapi.Certificate{}
	require.NoError(t, Into(co, ca))
	assert.True(t, ca.Spec.IsCA)
	assert.Equal(t, selfSigned.Name, ca.Spec.IssuerRef.Name)
	assert.Equal(t, "Issuer", ca.Spec.IssuerRef.Kind)

	io, err := Find(objs, "Issuer", tc.fullname+"-ca")
	require.NoError(t, err)
	caIssuer := &cmapi.Issuer{}
	require.NoError(t, Into(io, caIssuer))
	require.NotNil(t, caIssuer.Spec.CA)
	assert.Equal(t, ca.Spec.SecretName, caIssuer.Spec.CA.SecretName)
	assert.Equal(t, caIssuer.Name, serving.Spec.IssuerRef.Name)
	assert.Equal(t, "Issuer", serving.Spec.IssuerRef.Kind)
	assert.NotEqual(t, ca.Spec.SecretName, serving.Spec.SecretName)
}

func deployment(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) *appsv1.Deployment {
	t.Helper()
	o, err := Find(objs, "Deployment", tc.fullname)
	require.NoError(t, err)
	d := &appsv1.Deployment{}
	require.NoError(t, Into(o, d))
	return d
}

func checkDeployment(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) {
	t.Helper()
	d := deployment(t, objs, tc)
	require.NotNil(t, d.Spec.Replicas)
	assert.Equal(t, int32(2), *d.Spec.Replicas)
	pod := d.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]

	// Hardening.
	require.NotNil(t, pod.SecurityContext)
	assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	sc := c.SecurityContext
	require.NotNil(t, sc)
	assert.True(t, *sc.RunAsNonRoot)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.False(t, *sc.Privileged)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	assert.NotEmpty(t, c.Resources.Requests)
	assert.NotEmpty(t, c.Resources.Limits)
	assert.Equal(t, "system-cluster-critical", pod.PriorityClassName, "a fail-closed webhook must not be preempted")

	// Spread over nodes.
	require.NotNil(t, pod.Affinity)
	require.NotNil(t, pod.Affinity.PodAntiAffinity)
	pref := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	require.Len(t, pref, 1)
	assert.Equal(t, "kubernetes.io/hostname", pref[0].PodAffinityTerm.TopologyKey)
	antiSel, err := metav1.LabelSelectorAsSelector(pref[0].PodAffinityTerm.LabelSelector)
	require.NoError(t, err)
	assert.True(t, antiSel.Matches(labels.Set(d.Spec.Template.Labels)))

	// Ports and probes.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	assert.Equal(t, map[string]int32{"webhook": 9443, "metrics": 8080, "health": 8081}, ports)
	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.LivenessProbe)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, "health", c.ReadinessProbe.HTTPGet.Port.String())
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "health", c.LivenessProbe.HTTPGet.Port.String())

	// Command line.
	assert.Equal(t, []string{"/trainguard"}, c.Command)
	require.NotEmpty(t, c.Args)
	assert.Equal(t, "serve", c.Args[0])
	wantArgs := []string{
		"--config=/etc/trainguard/config.yaml", "--cert-dir=/etc/trainguard/certs", "--webhook-port=9443",
		"--metrics-bind-address=:8080", "--metrics-secure=true", "--health-probe-bind-address=:8081", "--namespace=" + tc.namespace,
		"--leader-elect=true", fmt.Sprintf("--rescheduler=%t", tc.rescheduler),
	}
	if tc.certManager {
		wantArgs = append(wantArgs, "--cert-mode=files")
	} else {
		wantArgs = append(wantArgs, "--cert-mode=self-managed", "--cert-secret="+secretName(tc),
			"--webhook-service="+tc.fullname, "--webhook-config-name="+tc.fullname)
	}
	assert.Equal(t, wantArgs, c.Args[1:])
	var podNS *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "POD_NAMESPACE" {
			podNS = &c.Env[i]
		}
	}
	require.NotNil(t, podNS, "POD_NAMESPACE from the downward API")
	assert.Equal(t, "metadata.namespace", podNS.ValueFrom.FieldRef.FieldPath)

	// Volumes: the certificate dir is mounted whole, never with subPath, so
	// renewed certificates reach the certwatcher.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	certMount, ok := mounts["certs"]
	require.True(t, ok)
	assert.Equal(t, "/etc/trainguard/certs", certMount.MountPath)
	assert.Empty(t, certMount.SubPath)
	assert.Empty(t, certMount.SubPathExpr)
	if tc.certManager {
		require.NotNil(t, vols["certs"].Secret)
		assert.Equal(t, secretName(tc), vols["certs"].Secret.SecretName)
		assert.Empty(t, vols["certs"].Secret.Items, "all of tls.crt, tls.key and ca.crt")
		assert.Equal(t, int32(0o440), *vols["certs"].Secret.DefaultMode)
		assert.True(t, certMount.ReadOnly)
	} else {
		require.NotNil(t, vols["certs"].EmptyDir, "self-managed mode writes its certificates into an emptyDir")
		assert.Equal(t, corev1.StorageMediumMemory, vols["certs"].EmptyDir.Medium)
		assert.False(t, certMount.ReadOnly)
	}
	assert.Equal(t, "/etc/trainguard/config.yaml", mounts["config"].MountPath)
	require.NotNil(t, vols["config"].ConfigMap)
	assert.Equal(t, tc.fullname, vols["config"].ConfigMap.Name)
	assert.Len(t, pod.Volumes, 2, "the only writable path is the self-managed cert dir")
	assert.Regexp(t, "^[0-9a-f]{64}$", d.Spec.Template.Annotations["checksum/config"])
	assert.Equal(t, tc.fullname, pod.ServiceAccountName)
}

func checkPDBAndService(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) {
	t.Helper()
	podLabels := labels.Set(deployment(t, objs, tc).Spec.Template.Labels)
	o, err := Find(objs, "PodDisruptionBudget", tc.fullname)
	require.NoError(t, err)
	pdb := &policyv1.PodDisruptionBudget{}
	require.NoError(t, Into(o, pdb))
	require.NotNil(t, pdb.Spec.MinAvailable)
	assert.Equal(t, 1, pdb.Spec.MinAvailable.IntValue())
	assert.Nil(t, pdb.Spec.MaxUnavailable)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, sel.Matches(podLabels))

	so, err := Find(objs, "Service", tc.fullname)
	require.NoError(t, err)
	svc := &corev1.Service{}
	require.NoError(t, Into(so, svc))
	assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels))
	var webhookPort *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == 443 {
			webhookPort = &svc.Spec.Ports[i]
		}
	}
	require.NotNil(t, webhookPort)
	assert.Equal(t, "webhook", webhookPort.TargetPort.String())
}

// ruleFor returns the verbs granted on group/resource (optionally only for named resources).
func verbsFor(rules []rbacv1.PolicyRule, group, resource string, named bool) []string {
	var verbs []string
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && (len(r.ResourceNames) > 0) == named {
			verbs = append(verbs, r.Verbs...)
		}
	}
	slices.Sort(verbs)
	return verbs
}

func checkRBAC(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) {
	t.Helper()
	o, err := Find(objs, "ClusterRole", tc.fullname)
	require.NoError(t, err)
	cr := &rbacv1.ClusterRole{}
	require.NoError(t, Into(o, cr))
	ro, err := Find(objs, "Role", tc.fullname)
	require.NoError(t, err)
	role := &rbacv1.Role{}
	require.NoError(t, Into(ro, role))

	for _, r := range append(slices.Clone(cr.Rules), role.Rules...) {
		assert.NotContains(t, r.Verbs, "*")
		assert.NotContains(t, r.Resources, "*")
		assert.NotContains(t, r.APIGroups, "*")
	}
	// Each right is rendered once: a rule repeated (the Kueue rules were,
	// once per job kind) is noise a reviewer has to prove harmless.
	for _, rules := range [][]rbacv1.PolicyRule{cr.Rules, role.Rules} {
		seen := map[string]bool{}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						key := fmt.Sprintf("%s/%s %v %s", g, res, r.ResourceNames, v)
						assert.False(t, seen[key], "%s is granted twice", key)
						seen[key] = true
					}
				}
			}
		}
	}
	sorted := func(v ...string) []string { slices.Sort(v); return v }
	var none []string
	assert.Equal(t, sorted("get", "list", "watch", "patch"), verbsFor(cr.Rules, "", "namespaces", false))
	assert.Equal(t, sorted("create", "patch"), verbsFor(cr.Rules, "", "events", false))
	assert.Equal(t, sorted("create", "patch"), verbsFor(cr.Rules, "events.k8s.io", "events", false))
	assert.Equal(t, none, verbsFor(cr.Rules, "", "secrets", false), "no cluster-wide access to Secrets")
	// No pod subresource but the rescheduler's eviction and status (the
	// policy fences the others too, TestAdmissionPolicyFencesPodSubresources).
	for _, res := range []string{"pods/binding", "pods/ephemeralcontainers", "pods/resize", "pods/exec", "pods/attach",
		"pods/portforward", "pods/proxy", "serviceaccounts/token"} {
		assert.Equal(t, none, append(verbsFor(cr.Rules, "", res, false), verbsFor(role.Rules, "", res, false)...), res)
	}
	// The right to write the webhook configurations is
	// the right to reroute admission; it exists only where trainguard
	// injects the CA bundle itself, and never unnamed.
	for _, res := range []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"} {
		assert.Equal(t, none, verbsFor(cr.Rules, "admissionregistration.k8s.io", res, false), "no informer reads them")
		if tc.certManager {
			assert.Equal(t, none, verbsFor(cr.Rules, "admissionregistration.k8s.io", res, true), "cert-manager's cainjector writes the bundle")
		} else {
			assert.Equal(t, sorted("get", "update"), verbsFor(cr.Rules, "admissionregistration.k8s.io", res, true))
		}
	}
	for _, r := range cr.Rules {
		if len(r.ResourceNames) > 0 {
			assert.Equal(t, []string{tc.fullname}, r.ResourceNames, "only this release's configurations")
		}
	}
	assert.Equal(t, none, verbsFor(cr.Rules, "", "configmaps", false), "no ConfigMap outside the release namespace: records live there")
	if tc.rescheduler {
		assert.Equal(t, sorted("get", "list", "watch", "create", "delete", "patch"), verbsFor(cr.Rules, "", "pods", false))
		assert.Equal(t, sorted("create"), verbsFor(cr.Rules, "", "pods/eviction", false), "evictions, so PodDisruptionBudgets hold")
		assert.Equal(t, sorted("patch"), verbsFor(cr.Rules, "", "pods/status", false), "a lost pod is marked Failed before its force delete")
		assert.Equal(t, sorted("get", "list", "watch"), verbsFor(cr.Rules, "", "nodes", false))
		assert.Equal(t, sorted("get", "list", "watch", "create", "update", "delete"), verbsFor(role.Rules, "", "configmaps", false))
		assert.Equal(t, sorted("get", "patch"), verbsFor(cr.Rules, "kubeflow.org", "pytorchjobs", false))
		assert.Equal(t, sorted("get", "patch"), verbsFor(cr.Rules, "training.kubedl.io", "pytorchjobs", false))
		// The priority-boost controller runs beside the rescheduler and
		// reads Workloads and priority classes, boost or not (it exports the
		// work at risk); it may patch a Workload only when it boosts.
		if tc.boost {
			assert.Equal(t, sorted("get", "list", "watch", "patch"), verbsFor(cr.Rules, "kueue.x-k8s.io", "workloads", false))
		} else {
			assert.Equal(t, sorted("get", "list", "watch"), verbsFor(cr.Rules, "kueue.x-k8s.io", "workloads", false), "no Workload patch with the boost off")
		}
		assert.Equal(t, sorted("list", "watch"), verbsFor(cr.Rules, "kueue.x-k8s.io", "workloadpriorityclasses", false))
		assert.Equal(t, sorted("list", "watch"), verbsFor(cr.Rules, "scheduling.k8s.io", "priorityclasses", false))
	} else {
		assert.Equal(t, none, verbsFor(cr.Rules, "", "pods", false))
		assert.Equal(t, none, verbsFor(cr.Rules, "", "pods/eviction", false))
		assert.Equal(t, none, verbsFor(cr.Rules, "", "pods/status", false))
		assert.Equal(t, none, verbsFor(cr.Rules, "", "nodes", false))
		assert.Equal(t, sorted("get", "list", "watch"), verbsFor(role.Rules, "", "configmaps", false), "the pod webhook still reads bad-node records")
		assert.Equal(t, none, verbsFor(cr.Rules, "kubeflow.org", "pytorchjobs", false))
		for _, res := range []string{"workloads", "workloadpriorityclasses"} {
			assert.Equal(t, none, verbsFor(cr.Rules, "kueue.x-k8s.io", res, false), "no boost controller without the rescheduler")
		}
		assert.Equal(t, none, verbsFor(cr.Rules, "scheduling.k8s.io", "priorityclasses", false))
	}

	assert.Equal(t, tc.namespace, role.Namespace)
	// The leader Lease by its name (RBAC cannot restrict create by name:
	// the fence refuses any other); no delete, and no other Lease readable.
	assert.Equal(t, []string{"create"}, verbsFor(role.Rules, "coordination.k8s.io", "leases", false))
	assert.Equal(t, sorted("get", "update"), verbsFor(role.Rules, "coordination.k8s.io", "leases", true))
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "leases") && len(r.ResourceNames) > 0 {
			assert.Equal(t, []string{contract.LeaderElectionID}, r.ResourceNames, "the Lease the binary elects its leader with")
		}
	}
	if tc.certManager {
		assert.Equal(t, none, verbsFor(role.Rules, "", "secrets", false))
		assert.Equal(t, none, verbsFor(role.Rules, "", "secrets", true))
	} else {
		assert.Equal(t, []string{"create"}, verbsFor(role.Rules, "", "secrets", false))
		assert.Equal(t, sorted("get", "update"), verbsFor(role.Rules, "", "secrets", true))
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "secrets") && len(r.ResourceNames) > 0 {
				assert.Equal(t, []string{secretName(tc)}, r.ResourceNames)
			}
		}
	}

	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		bo, err := Find(objs, kind, tc.fullname)
		require.NoError(t, err)
		b := &rbacv1.RoleBinding{}
		require.NoError(t, Into(bo, b))
		require.Len(t, b.Subjects, 1)
		assert.Equal(t, rbacv1.Subject{Kind: "ServiceAccount", Name: tc.fullname, Namespace: tc.namespace}, b.Subjects[0])
		assert.Equal(t, tc.fullname, b.RoleRef.Name)
	}
}

// checkFenceOwnState: the fence matches every write of ConfigMaps and Leases
// (RBAC cannot name the bad-node records nor restrict create by name), and
// knows the records and the Lease by the names the binary gives them.
func checkFenceOwnState(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	fence := fencedWrites(t, objs)
	assert.ElementsMatch(t, []string{"CREATE", "UPDATE", "DELETE"}, fence["/configmaps"], "the fence matches ConfigMap writes")
	assert.ElementsMatch(t, []string{"CREATE", "UPDATE", "DELETE"}, fence["coordination.k8s.io/leases"], "the fence matches Lease writes")
	o := OfKind(objs, "ValidatingAdmissionPolicy")
	require.Len(t, o, 1)
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	require.NoError(t, Into(o[0], vap))
	var cel strings.Builder
	for _, v := range vap.Spec.Variables {
		cel.WriteString(v.Expression + "\n")
	}
	for _, v := range vap.Spec.Validations {
		cel.WriteString(v.Expression + "\n")
	}
	for what, name := range map[string]string{
		"the records' name prefix (rescheduler JobKey.RecordName)": contract.BadNodeRecordPrefix,
		"the records' label":      contract.LabelBadNodes,
		"the leader Lease's name": contract.LeaderElectionID,
	} {
		assert.True(t, strings.Contains(cel.String(), "'"+name+"'"), "the fence's CEL names %s, %q", what, name)
	}
}

func renderedConfig(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) (*configv1alpha1.Configuration, string) {
	t.Helper()
	o, err := Find(objs, "ConfigMap", tc.fullname)
	require.NoError(t, err)
	cm := &corev1.ConfigMap{}
	require.NoError(t, Into(o, cm))
	raw, ok := cm.Data["config.yaml"]
	require.True(t, ok)
	cfg, _, err := config.Parse([]byte(raw))
	require.NoError(t, err, "the rendered policy file must load strictly:\n%s", raw)
	return cfg, raw
}

func checkConfig(t *testing.T, objs []*unstructured.Unstructured, tc renderCase) {
	t.Helper()
	cfg, _ := renderedConfig(t, objs, tc)
	assert.Equal(t, tc.clusterWide, cfg.ClusterWide)
	assert.Equal(t, excludedOf(tc), cfg.ExcludedNamespaces, "the policy file excludes exactly what the webhook selectors exclude")
	assert.Equal(t, deployment(t, objs, tc).Spec.Template.Spec.Containers[0].Image, cfg.Agent.Image, "the agent comes from trainguard's own image by default")
}

// The chart's documented config defaults must be the policy package's
// defaults, so values.yaml never silently diverges from `trainguard inject`.
func TestChartConfigDefaultsMatchPolicyDefaults(t *testing.T) {
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system")
	require.NoError(t, err)
	tc := cases()[0]
	cfg, _ := renderedConfig(t, objs, tc)
	want := configv1alpha1.Default()
	want.Agent.Image = cfg.Agent.Image
	want.ExcludedNamespaces = []string{"kube-system", "trainguard-system"}
	if want.Mutators == nil {
		want.Mutators = map[string]bool{}
	}
	assert.Equal(t, want, cfg)
	assert.Equal(t, version.Image, cfg.Agent.Image, "pinned to this release")
}

func TestChartConfigValuesReachPolicyFile(t *testing.T) {
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system",
		"config.checkpoint.claim=ckpt", "config.mutators.gpu=false", "config.gpu.defaultCount=0",
		"config.checkpoint.requireDurable=true", "config.gpu.defaultFor=AllJobs",
		"config.agent.image=registry.example/agent:1", "image.digest=sha256:"+strings.Repeat("a", 64))
	require.NoError(t, err)
	cfg, _ := renderedConfig(t, objs, renderCase{fullname: "trainguard"})
	assert.Equal(t, "ckpt", cfg.Checkpoint.Claim)
	assert.Equal(t, map[string]bool{"gpu": false}, cfg.Mutators)
	assert.Equal(t, int64(0), *cfg.GPU.DefaultCount)
	assert.True(t, cfg.Checkpoint.RequireDurable)
	assert.Equal(t, configv1alpha1.GPUDefaultForAllJobs, cfg.GPU.DefaultFor)
	assert.Equal(t, "registry.example/agent:1", cfg.Agent.Image)
	d := deployment(t, objs, renderCase{fullname: "trainguard"})
	assert.Equal(t, "ghcr.io/trainguard/trainguard@sha256:"+strings.Repeat("a", 64), d.Spec.Template.Spec.Containers[0].Image)

	// A config change rolls the pods (the file is mounted with subPath).
	base, err := Render(helm, dir, "trainguard", "trainguard-system")
	require.NoError(t, err)
	assert.NotEqual(t,
		deployment(t, base, renderCase{fullname: "trainguard"}).Spec.Template.Annotations["checksum/config"],
		d.Spec.Template.Annotations["checksum/config"])
}

func TestChartOptionalSettings(t *testing.T) {
	helm, dir := helmAndChart(t)
	objs, err := Render(helm, dir, "trainguard", "trainguard-system",
		"priorityClassName=system-cluster-critical", "replicaCount=1", "webhook.timeoutSeconds=10", "webhook.reinvocationPolicy=Never")
	require.NoError(t, err)
	d := deployment(t, objs, renderCase{fullname: "trainguard"})
	assert.Equal(t, "system-cluster-critical", d.Spec.Template.Spec.PriorityClassName)
	assert.Empty(t, OfKind(objs, "PodDisruptionBudget"), "one replica with minAvailable 1 would block every drain")
	m, v, err := WebhookConfigurations(objs)
	require.NoError(t, err)
	for _, w := range entries(m, v) {
		assert.Equal(t, int32(10), *w.timeoutSeconds)
	}
	for _, w := range m.Webhooks {
		assert.Equal(t, admissionregistrationv1.NeverReinvocationPolicy, *w.ReinvocationPolicy)
	}
}

// The schema refuses what the chart would otherwise silently ignore or
// render wrong; unknown keys at the top level and under config are the
// template's (messages_test.go), which names where they belong.
func TestChartSchemaRejectsBadValues(t *testing.T) {
	helm, dir := helmAndChart(t)
	for _, set := range []string{"typo=1", "config.typo=1", "config.clusterWide=true"} {
		_, err := Render(helm, dir, "trainguard", "trainguard-system", set)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "unknown key", set)
	}
	for _, set := range []string{
		"config.mutators.gpuu=false",
		"webhook.failurePolicy=Sometimes",
		"webhook.timeoutSeconds=31",
		"certManager.issuerRef.kind=ClusterIssuer", // kind without name
		"certManager.duration=90d",
		"image.digest=latest",
		"replicaCount=0",
		"excludedNamespaces={Not_A_Namespace}",
		"config.checkpoint.preStopTimeout=soon",
		"config.gpu.defaultFor=Some",
		"config.checkpoint.requireDurable=yes",
	} {
		t.Run(set, func(t *testing.T) {
			_, err := Render(helm, dir, "trainguard", "trainguard-system", set)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "schema")
		})
	}
}

func TestHelmBinMissingIsAnError(t *testing.T) {
	_, err := Render("/nonexistent/helm", "charts/trainguard", "trainguard", "default")
	require.Error(t, err)
}

func TestCertManagerCRDsAreInTheModuleCache(t *testing.T) {
	files, err := CertManagerCRDs()
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	assert.Contains(t, names, "cert-manager.io_certificates.yaml")
	assert.Contains(t, names, "cert-manager.io_issuers.yaml")
}
