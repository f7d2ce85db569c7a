package chartapply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/testing/builders"
)

// job creates (as the cluster admin) the object builders rendered as JSON
// and returns it as the API server stored it.
func job(t *testing.T, manifest []byte) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, u.UnmarshalJSON(manifest))
	require.NoError(t, apiServer.c.Create(context.Background(), u), "creating %s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
	return u
}

// dryPatch dry-runs a patch of obj as c.
func dryPatch(c client.Client, obj client.Object, pt types.PatchType, patch string) error {
	return c.Patch(context.Background(), obj.DeepCopyObject().(client.Object), client.RawPatch(pt, []byte(patch)), client.DryRunAll)
}

const (
	// What the rescheduler writes (internal/controllers/rescheduler/actions.go annotate
	// and markExhausted).
	decisionPatch  = `{"metadata":{"annotations":{"trainguard.io/rescheduler-decision":"PermanentFailure"}}}`
	exhaustedPatch = `{"metadata":{"annotations":{"trainguard.io/reschedules-exhausted":"10"}}}`
)

// trainguard's ServiceAccount may patch a pod or a job
// only to write the rescheduler's own annotations (and a pod's status, to
// mark it Failed), and only in namespaces trainguard injects. A stolen
// token can no longer change a running pod's image, or rewrite a job's pod
// template or toggle its runPolicy.suspend, in kube-system or anywhere.
func TestAdmissionPolicyFencesPodAndJobUpdates(t *testing.T) {
	const release, ns, policy = "fenceupd", "fenceupd-system", "fenceupd-trainguard-fence"
	sa := installFence(t, release, ns, "trainer.enabled=true")
	in := optIn("enabled")
	pod := tenantNamespace(t, "fenceupd-in", in)
	waitPolicyActive(t, sa, podIn(t, ns), policy)

	// Pods in an opted-in namespace: the rescheduler's writes pass.
	ops := podOps(sa, pod)
	for _, op := range []string{"patch", "mark-failed"} {
		assert.NoError(t, ops[op](), "the rescheduler's %s", op)
	}
	assert.NoError(t, dryPatch(sa, pod, types.MergePatchType, exhaustedPatch), "a bare pod's reschedules-exhausted annotation")
	for what, patch := range map[string]string{
		"the image":                      `{"spec":{"containers":[{"name":"pytorch","image":"evil.example.com/miner:1"}]}}`,
		"a label":                        `{"metadata":{"labels":{"app":"hijacked"}}}`,
		"another annotation":             `{"metadata":{"annotations":{"example.com/owner":"mallory"}}}`,
		"trainguard's policy annotation": `{"metadata":{"annotations":{"trainguard.io/taskd":"disabled"}}}`,
		"a finalizer":                    `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"its own annotation and the image": `{"metadata":{"annotations":{"trainguard.io/rescheduler-decision":"x"}},` +
			`"spec":{"containers":[{"name":"pytorch","image":"evil.example.com/miner:1"}]}}`,
	} {
		err := dryPatch(sa, pod, types.StrategicMergePatchType, patch)
		assert.True(t, refusedByPolicy(err, policy), "a pod update changing %s must be refused, got %v", what, err)
		if err != nil {
			assert.Contains(t, err.Error(), "may change only its own annotations", what)
		}
	}

	// Jobs, kubeflow's and KubeDL's.
	ensureNamespace(t, context.Background(), "kube-system")
	jobs := map[string][]*unstructured.Unstructured{}
	for _, where := range []string{pod.Namespace, "kube-system"} {
		jobs[where] = []*unstructured.Unstructured{
			job(t, builders.MakeKubeflowJob(where, "fenceupd-kubeflow").JSON()),
			job(t, builders.MakeKubeDLJob(where, "fenceupd-kubedl").JSON()),
		}
	}
	for _, j := range jobs[pod.Namespace] {
		assert.NoError(t, dryPatch(sa, j, types.MergePatchType, exhaustedPatch), "the rescheduler annotates a %s whose cap is reached", j.GetAPIVersion())
		for what, patch := range jobAttacks() {
			err := dryPatch(sa, j, types.MergePatchType, patch)
			assert.True(t, refusedByPolicy(err, policy), "%s %s in an opted-in namespace must be refused, got %v", what, j.GetAPIVersion(), err)
		}
		err := sa.Delete(context.Background(), j.DeepCopy(), client.DryRunAll)
		assert.True(t, apierrors.IsForbidden(err), "deleting a job is not trainguard's, got %v", err)
	}
	for _, j := range jobs["kube-system"] {
		for what, patch := range jobAttacks() {
			err := dryPatch(sa, j, types.MergePatchType, patch)
			assert.True(t, refusedByPolicy(err, policy), "%s %s in kube-system must be refused, got %v", what, j.GetAPIVersion(), err)
		}
		err := dryPatch(sa, j, types.MergePatchType, exhaustedPatch)
		assert.True(t, refusedByPolicy(err, policy), "even its own annotation, outside injected namespaces, got %v", err)
		if err != nil {
			assert.Contains(t, err.Error(), "only in namespaces trainguard injects")
		}
	}

	fenceTrainJobs(t, sa, pod.Namespace, policy)
	fenceBatchJobs(t, sa, pod.Namespace, policy)

	// Runtimes and JobSets: RBAC (the first fence) grants no write at all.
	for _, gvr := range []schema.GroupVersionKind{
		{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainingRuntime"},
		{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"},
	} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvr)
		u.SetNamespace(pod.Namespace)
		u.SetName("any")
		err := dryPatch(sa, u, types.MergePatchType, exhaustedPatch)
		assert.True(t, apierrors.IsForbidden(err), "patching a %s is forbidden by RBAC, got %v", gvr.Kind, err)
	}
}

// fenceTrainJobs: RBAC grants patch on TrainJobs (the rescheduler marks one
// at its cap), so the policy fences them as PyTorchJobs: only the mark, only
// in namespaces trainguard injects.
func fenceTrainJobs(t *testing.T, sa client.Client, injected, policy string) {
	t.Helper()
	fenceMarkOnly(t, sa, injected, policy, func(where string) []byte {
		return []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob",` +
			`"metadata":{"namespace":"` + where + `","name":"fenceupd-trainjob"},"spec":{"runtimeRef":{"name":"torch-distributed"}}}`)
	}, map[string]string{
		"suspending it":       `{"spec":{"suspend":true}}`,
		"swapping the image":  `{"spec":{"trainer":{"image":"evil.example.com/miner:1"}}}`,
		"a label":             `{"metadata":{"labels":{"app":"hijacked"}}}`,
		"another annotation":  `{"metadata":{"annotations":{"trainguard.io/inject":"disabled"}}}`,
		"the mark and a spec": `{"metadata":{"annotations":{"trainguard.io/reschedules-exhausted":"1"}},"spec":{"suspend":true}}`,
	})
}

// fenceBatchJobs: a user's batch Job is a job like a PyTorchJob (RBAC get
// and patch, the cap mark), fenced alike: suspending it, resizing it,
// relabelling it or deleting it is refused.
func fenceBatchJobs(t *testing.T, sa client.Client, injected, policy string) {
	t.Helper()
	fenceMarkOnly(t, sa, injected, policy, func(where string) []byte {
		return builders.MakeBatchJob(where, "fenceupd-batch").JSON()
	}, map[string]string{
		"suspending it":      `{"spec":{"suspend":true}}`,
		"resizing it":        `{"spec":{"parallelism":50}}`,
		"a label":            `{"metadata":{"labels":{"app":"hijacked"}}}`,
		"another annotation": `{"metadata":{"annotations":{"trainguard.io/inject":"disabled"}}}`,
	})
}

// fenceMarkOnly creates the job manifest(where) makes in the injected
// namespace and in kube-system: trainguard's account may write the cap
// mark on the first only, and none of attacks (nor a delete) anywhere.
func fenceMarkOnly(t *testing.T, sa client.Client, injected, policy string, manifest func(where string) []byte, attacks map[string]string) {
	t.Helper()
	for _, where := range []string{injected, "kube-system"} {
		j := job(t, manifest(where))
		err := dryPatch(sa, j, types.MergePatchType, exhaustedPatch)
		if where == injected {
			assert.NoError(t, err, "the rescheduler marks a %s whose cap is reached", j.GetKind())
		} else {
			assert.True(t, refusedByPolicy(err, policy), "the mark outside injected namespaces, got %v", err)
		}
		for what, patch := range attacks {
			err := dryPatch(sa, j, types.MergePatchType, patch)
			assert.True(t, refusedByPolicy(err, policy), "%s of a %s in %s must be refused, got %v", what, j.GetKind(), where, err)
		}
		err = sa.Delete(context.Background(), j.DeepCopy(), client.DryRunAll)
		assert.True(t, apierrors.IsForbidden(err), "deleting a %s is not trainguard's, got %v", j.GetKind(), err)
	}
}

// jobAttacks are job updates a stolen token would make.
func jobAttacks() map[string]string {
	return map[string]string{
		"rewriting the pod template": `{"spec":{"pytorchReplicaSpecs":{"Master":{"template":{"spec":{"containers":[{"name":"pytorch","image":"evil.example.com/miner:1"}]}}}}}}`,
		"toggling runPolicy.suspend": `{"spec":{"runPolicy":{"suspend":true}}}`,
		"another annotation":         `{"metadata":{"annotations":{"trainguard.io/inject":"disabled"}}}`,
		"a label":                    `{"metadata":{"labels":{"app":"hijacked"}}}`,
	}
}
