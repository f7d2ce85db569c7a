package chartapply

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/test/chart"
)

// fenceKinds are the rendered objects that define trainguard's rights.
var fenceKinds = map[string]bool{
	"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// installFence renders the chart and creates (for real) its ServiceAccount,
// RBAC and ValidatingAdmissionPolicy, then returns a client that
// impersonates trainguard's ServiceAccount, as the API server sees the
// running pod.
func installFence(t *testing.T, release, namespace string, set ...string) client.Client {
	t.Helper()
	ctx := context.Background()
	objs := renderChart(t, release, namespace, set...)
	ensureNamespace(t, ctx, namespace)
	n := 0
	for _, o := range objs {
		if fenceKinds[o.GetKind()] {
			require.NoError(t, apiServer.c.Create(ctx, o.DeepCopy()), "creating %s", describe(o))
			n++
		}
	}
	require.Len(t, chart.OfKind(objs, "ValidatingAdmissionPolicy"), 1, "the chart ships the policy")
	require.GreaterOrEqual(t, n, 7, "RBAC (trainguard, leader election, metrics auth) and the policy with its binding")
	sa, err := client.New(saConfig(release, namespace), client.Options{})
	require.NoError(t, err)
	return sa
}

// saConfig impersonates the ServiceAccount of release in namespace, as the
// API server sees the running pod.
func saConfig(release, namespace string) *rest.Config {
	cfg := rest.CopyConfig(apiServer.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s-trainguard", namespace, release),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return cfg
}

// nsMeta is what a tenant namespace carries.
type nsMeta struct{ labels, annotations map[string]string }

// optIn is a namespace annotated trainguard.io/inject=value with the label
// mirrored, as the namespace webhook leaves it.
func optIn(value string) nsMeta {
	return nsMeta{map[string]string{"trainguard.io/inject": value}, map[string]string{"trainguard.io/inject": value}}
}

// tenantNamespace creates a namespace, its default ServiceAccount and one
// pod (created as the cluster admin).
func tenantNamespace(t *testing.T, name string, m nsMeta) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, apiServer.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: m.labels, Annotations: m.annotations}}))
	err := apiServer.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default"}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	return podIn(t, name)
}

func podIn(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "worker"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}}},
	}
	require.NoError(t, apiServer.c.Create(context.Background(), p))
	return p
}

// podOps are the pod operations the policy fences, all as dry runs so the
// pod stays for the next one. Each returns the API server's answer.
func podOps(sa client.Client, pod *corev1.Pod) map[string]func() error {
	ctx := context.Background()
	return map[string]func() error{
		"delete": func() error { return sa.Delete(ctx, pod.DeepCopy(), client.DryRunAll) },
		"evict": func() error {
			return sa.SubResource("eviction").Create(ctx, pod.DeepCopy(), &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
				DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
			})
		},
		// A bare pod's replacement carries the marker of the pod it replaces.
		"create": func() error { return sa.Create(ctx, replacement(pod), client.DryRunAll) },
		"patch": func() error {
			return sa.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"trainguard.io/rescheduler-decision":"x"}}}`)), client.DryRunAll)
		},
		// What the rescheduler does to a lost pod before its force delete; a
		// stolen token must not be able to fail pods elsewhere with it.
		"mark-failed": func() error {
			return sa.Status().Patch(ctx, pod.DeepCopy(), client.RawPatch(types.StrategicMergePatchType,
				[]byte(`{"status":{"phase":"Failed","conditions":[{"type":"DisruptionTarget","status":"True","reason":"DeletionByTrainguardNodeLost"}]}}`)),
				&client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{DryRun: []string{metav1.DryRunAll}}})
		},
	}
}

// replacement is what the rescheduler creates for a bare pod it injected
// (internal/controllers/rescheduler replacementFor): the same spec, with
// trainguard's marker, which the policy requires of any pod it creates.
func replacement(pod *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: "recreated",
			Labels:      map[string]string{contract.LabelManaged: "true"},
			Annotations: map[string]string{contract.AnnotationInjected: contract.InjectionPreStop},
		},
		Spec: *pod.Spec.DeepCopy(),
	}
}

// refusedByPolicy says err is the ValidatingAdmissionPolicy's refusal.
func refusedByPolicy(err error, policy string) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) ||
		(err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'"))
}

// waitPolicyActive waits until the API server enforces the policy (it
// compiles policies asynchronously after they are created).
func waitPolicyActive(t *testing.T, sa client.Client, pod *corev1.Pod, policy string) {
	t.Helper()
	require.Eventually(t, func() bool {
		err := podOps(sa, pod)["delete"]()
		return err != nil && strings.Contains(err.Error(), policy)
	}, 30*time.Second, 100*time.Millisecond, "the policy %s is enforced", policy)
}

// Impersonating trainguard's ServiceAccount against the rendered chart:
// RBAC lets it touch pods cluster-wide (bare pods, evictions), and the
// ValidatingAdmissionPolicy confines that to namespaces that opted in, and
// its namespace updates to the trainguard.io/inject label.
func TestAdmissionPolicyFencesTheServiceAccount(t *testing.T) {
	ctx := context.Background()
	const release, ns, policy = "fence", "fence-system", "fence-trainguard-fence"
	sa := installFence(t, release, ns)
	in := optIn("enabled")
	in.labels["team"] = "ml"
	optedIn := tenantNamespace(t, "fence-in", in)
	notOptedIn := tenantNamespace(t, "fence-out", nsMeta{})
	optedOut := tenantNamespace(t, "fence-disabled", optIn("disabled"))
	own := podIn(t, ns)
	waitPolicyActive(t, sa, notOptedIn, policy)

	for op, do := range podOps(sa, optedIn) {
		assert.NoError(t, do(), "%s in a namespace that opted in is allowed (RBAC grants it, the policy passes it)", op)
	}
	for _, pod := range []*corev1.Pod{notOptedIn, optedOut, own} {
		for op, do := range podOps(sa, pod) {
			err := do()
			assert.True(t, refusedByPolicy(err, policy), "%s in namespace %s must be refused, got %v", op, pod.Namespace, err)
			if err != nil {
				assert.Contains(t, err.Error(), "trainguard's ServiceAccount may create, update, delete or evict pods, and annotate jobs (pytorchjobs, trainjobs, jobs), only in namespaces trainguard injects", "%s in %s", op, pod.Namespace)
			}
		}
	}

	// The rescheduler's Warning on a job at its in-place restart cap
	// (InPlaceRestartCapReached): an Event about the PyTorchJob, allowed in
	// an injected namespace only.
	jobEvent := func(namespace string) error {
		ev := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "job.cap"},
			EventTime:  metav1.NowMicro(), Type: corev1.EventTypeWarning, Reason: "InPlaceRestartCapReached", Action: "Evict",
			ReportingController: "trainguard-rescheduler", ReportingInstance: "trainguard-rescheduler-x",
			Regarding: corev1.ObjectReference{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Namespace: namespace, Name: "job", UID: "uid"},
			Note:      "in-place restarts of the job reached its cap (1/1)",
		}
		return sa.Create(ctx, ev, client.DryRunAll)
	}
	assert.NoError(t, jobEvent("fence-in"), "the cap's Event on a job in an injected namespace is allowed")
	err := jobEvent("fence-out")
	assert.True(t, refusedByPolicy(err, policy), "an Event in a namespace trainguard does not inject must be refused, got %v", err)

	// Namespaces: the opt-in label only.
	nsPatch := func(name, patch string) error {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		return sa.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)), client.DryRunAll)
	}
	assert.NoError(t, nsPatch("fence-in", `{"metadata":{"labels":{"trainguard.io/inject":"enabled"}}}`), "mirroring the opt-in label is allowed")
	for what, patch := range map[string]string{
		"a Pod Security label":             `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`,
		"the opt-in label and a PSA label": `{"metadata":{"labels":{"trainguard.io/inject":"enabled","pod-security.kubernetes.io/enforce":"privileged"}}}`,
		"removing a label":                 `{"metadata":{"labels":{"team":null}}}`,
		"an annotation":                    `{"metadata":{"annotations":{"scheduler.alpha.kubernetes.io/node-selector":"gpu=true"}}}`,
		"a finalizer":                      `{"metadata":{"finalizers":["example.com/hold"]}}`,
	} {
		err := nsPatch("fence-in", patch)
		assert.True(t, refusedByPolicy(err, policy), "a namespace update changing %s must be refused, got %v", what, err)
		if err != nil {
			assert.Contains(t, err.Error(), "may change only the trainguard.io/inject label", what)
		}
	}

	// RBAC, the first fence: no ConfigMap outside its own namespace.
	err = sa.Get(ctx, client.ObjectKey{Namespace: "fence-in", Name: "anything"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsForbidden(err), "reading a tenant's ConfigMap is forbidden, got %v", err)
	err = sa.List(ctx, &corev1.ConfigMapList{})
	assert.True(t, apierrors.IsForbidden(err), "listing ConfigMaps cluster-wide is forbidden, got %v", err)
	assert.NoError(t, sa.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)), "its own records are readable")
	err = sa.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}}, client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "no Secret rights with cert-manager, got %v", err)
}

// Cluster-wide mode: every namespace but the excluded ones and those that
// opted out; self-managed certificates: only its own Secret, by name.
func TestAdmissionPolicyClusterWideAndSelfManaged(t *testing.T) {
	ctx := context.Background()
	const release, ns, policy = "fencecw", "fencecw-system", "fencecw-trainguard-fence"
	sa := installFence(t, release, ns, "clusterWide=true", "certManager.enabled=false", "excludedNamespaces={fencecw-monitoring}")
	unlabelled := tenantNamespace(t, "fencecw-any", nsMeta{})
	optedOut := tenantNamespace(t, "fencecw-disabled", optIn("disabled"))
	excluded := tenantNamespace(t, "fencecw-monitoring", optIn("enabled"))
	own := podIn(t, ns)
	waitPolicyActive(t, sa, optedOut, policy)

	for op, do := range podOps(sa, unlabelled) {
		assert.NoError(t, do(), "%s in an unlabelled namespace is allowed in cluster-wide mode", op)
	}
	for _, pod := range []*corev1.Pod{optedOut, excluded, own} {
		for op, do := range podOps(sa, pod) {
			err := do()
			assert.True(t, refusedByPolicy(err, policy), "%s in namespace %s must be refused, got %v", op, pod.Namespace, err)
		}
	}

	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	assert.NoError(t, sa.Create(ctx, secret(release+"-trainguard-tls"), client.DryRunAll), "its own certificate Secret")
	err := sa.Create(ctx, secret("planted"), client.DryRunAll)
	assert.True(t, refusedByPolicy(err, policy), "RBAC cannot restrict create by name; the policy does, got %v", err)
	if err != nil {
		assert.Contains(t, err.Error(), "only manage its own certificate Secret")
	}
}

// nsPatcher dry-runs a merge patch of a namespace as sa.
func nsPatcher(sa client.Client) func(name, patch string) error {
	return func(name, patch string) error {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		return sa.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch)), client.DryRunAll)
	}
}

// assertPodOpsRefused asserts every fenced pod operation on pod is refused.
func assertPodOpsRefused(t *testing.T, sa client.Client, pod *corev1.Pod, policy, why string) {
	t.Helper()
	for op, do := range podOps(sa, pod) {
		err := do()
		assert.True(t, refusedByPolicy(err, policy), "%s in namespace %s must be refused (%s), got %v", op, pod.Namespace, why, err)
	}
}

const (
	labelEnabled  = `{"metadata":{"labels":{"trainguard.io/inject":"enabled"}}}`
	labelDisabled = `{"metadata":{"labels":{"trainguard.io/inject":"disabled"}}}`
	labelRemoved  = `{"metadata":{"labels":{"trainguard.io/inject":null}}}`
)

// Issue 24, item 1: the fence decides "injected" from the namespace's
// trainguard.io/inject annotation, which trainguard's ServiceAccount cannot
// write, not from the label, which it can; and it may set the label only to
// mirror the annotation. A stolen token can no longer label a namespace
// enabled and then create, delete, evict or patch pods there.
func TestAdmissionPolicyTrustsTheAnnotationNotTheLabel(t *testing.T) {
	const release, ns, policy = "fencelbl", "fencelbl-system", "fencelbl-trainguard-fence"
	sa := installFence(t, release, ns)
	plain := tenantNamespace(t, "fencelbl-plain", nsMeta{})
	labelledOnly := tenantNamespace(t, "fencelbl-labelled", nsMeta{labels: map[string]string{"trainguard.io/inject": "enabled"}})
	annotated := tenantNamespace(t, "fencelbl-annotated", nsMeta{annotations: map[string]string{"trainguard.io/inject": "enabled"}})
	waitPolicyActive(t, sa, plain, policy)
	nsPatch := nsPatcher(sa)

	// Step 1 of the attack: label a namespace that never opted in.
	for _, patch := range []string{labelEnabled, labelDisabled} {
		err := nsPatch(plain.Namespace, patch)
		assert.True(t, refusedByPolicy(err, policy), "labelling a namespace without the annotation (%s) must be refused, got %v", patch, err)
		if err != nil {
			assert.Contains(t, err.Error(), "only to mirror its trainguard.io/inject annotation (no label)")
		}
	}
	// Step 2: a namespace labelled by someone else is still not injected.
	assertPodOpsRefused(t, sa, labelledOnly, policy, "labelled enabled but not annotated")

	// The mirror's legitimate work: label an annotated namespace, unlabel
	// one whose annotation is gone; never the other value.
	assert.NoError(t, nsPatch(annotated.Namespace, labelEnabled), "mirroring the annotation into the label")
	assert.NoError(t, nsPatch(labelledOnly.Namespace, labelRemoved), "removing a label no annotation backs")
	err := nsPatch(annotated.Namespace, labelDisabled)
	assert.True(t, refusedByPolicy(err, policy), "a label contradicting the annotation must be refused, got %v", err)
	if err != nil {
		assert.Contains(t, err.Error(), "annotation (enabled), not to disabled")
	}
	// Opted in by annotation, before the mirror caught up: injected.
	for op, do := range podOps(sa, annotated) {
		assert.NoError(t, do(), "%s in a namespace annotated enabled (label not yet mirrored)", op)
	}
}

// Issue 24, item 1, cluster-wide mode: a namespace annotated disabled stays
// fenced whatever its label, and its disabled label cannot be removed.
func TestAdmissionPolicyClusterWideTrustsTheAnnotation(t *testing.T) {
	const release, ns, policy = "fencecwa", "fencecwa-system", "fencecwa-trainguard-fence"
	sa := installFence(t, release, ns, "clusterWide=true")
	optedOut := tenantNamespace(t, "fencecwa-out", optIn("disabled"))
	unlabelledOut := tenantNamespace(t, "fencecwa-out-unlabelled", nsMeta{annotations: map[string]string{"trainguard.io/inject": "disabled"}})
	waitPolicyActive(t, sa, optedOut, policy)
	nsPatch := nsPatcher(sa)

	err := nsPatch(optedOut.Namespace, labelRemoved)
	assert.True(t, refusedByPolicy(err, policy), "removing the disabled label of a namespace annotated disabled must be refused, got %v", err)
	err = nsPatch(optedOut.Namespace, labelEnabled)
	assert.True(t, refusedByPolicy(err, policy), "relabelling it enabled must be refused, got %v", err)
	assertPodOpsRefused(t, sa, unlabelledOut, policy, "annotated disabled, label missing")
	assert.NoError(t, nsPatch(unlabelledOut.Namespace, labelDisabled), "mirroring the opt-out into the label")
}
