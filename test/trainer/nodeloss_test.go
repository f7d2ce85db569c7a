package trainer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/test/controlplane"
)

// resilientRuntime is torch-distributed plus what docs/trainjob.md asks
// for: evictions (DisruptionTarget) do not count against backoffLimit (a
// pod failure policy needs restartPolicy Never).
func resilientRuntime(name string) string {
	rt := strings.Replace(torchDistributed(name), `                spec:
                  containers:`, `                spec:
                  restartPolicy: Never
                  containers:`, 1)
	return strings.Replace(rt, `            spec:
              template:`, `            spec:
              backoffLimit: 0
              podFailurePolicy:
                rules:
                  - action: Ignore
                    onPodConditions: [{type: DisruptionTarget, status: "True"}]
              template:`, 1)
}

// TestNodeLostTrainerPodIsReplacedElsewhere: a trainer pod on a node that
// stays NotReady past the grace is deleted gracefully by trainguard's
// rescheduler, the node is recorded for the TrainJob's JobSet, and the pod
// the Job creates again avoids it. What this suite cannot show (no Job
// controller in envtest): the Job's own accounting of the deleted pod; see
// docs/trainjob.md for the pod failure policy that keeps it from counting.
func TestNodeLostTrainerPodIsReplacedElsewhere(t *testing.T) {
	ns := namespace(t, true)
	require.NoError(t, apply(t, resilientRuntime("torch-resilient-"+ns)))
	require.NoError(t, apply(t, trainJob(ns, "resilient", "torch-resilient-"+ns, "")))
	job := jobOf(t, ns, "resilient")
	require.NotNil(t, job.Spec.PodFailurePolicy, "the runtime's pod failure policy reached the Job")
	bad, good := node(t, ns+"-a"), node(t, ns+"-b")
	pod := podOfJob(t, job, 0, func(p *corev1.Pod) { p.Spec.NodeName = bad })
	require.Equal(t, "true", pod.Labels[contract.LabelManaged])
	running(t, pod)

	setNodeReady(t, bad, corev1.ConditionFalse)
	require.Eventually(t, func() bool {
		cur := &corev1.Pod{}
		return env.c.Get(context.Background(), client.ObjectKeyFromObject(pod), cur) == nil && cur.DeletionTimestamp != nil
	}, 30*time.Second, 200*time.Millisecond, "the rescheduler deletes the pod off the lost node")

	key := jobs.Key{Namespace: ns, APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "resilient"}
	cm := &corev1.ConfigMap{}
	require.NoError(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: controlplane.Namespace, Name: rescheduler.RecordName(key)}, cm), "one record for the whole JobSet, in trainguard's own namespace")
	assert.Contains(t, strings.Join(mapValues(cm.Data), " "), bad)

	// The kubelet of a dead node never confirms; the pod goes, and the Job
	// creates its index again.
	require.NoError(t, client.IgnoreNotFound(env.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0))))
	replacement := podOfJob(t, job, 0)
	assert.Equal(t, []string{bad}, avoided(replacement), "the replacement avoids the lost node")
	assert.NotContains(t, avoided(replacement), good)

	js := &unstructured.Unstructured{}
	js.SetAPIVersion("jobset.x-k8s.io/v1alpha2")
	js.SetKind("JobSet")
	require.NoError(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "resilient"}, js))
	conds, _, _ := unstructured.NestedSlice(js.Object, "status", "conditions")
	for _, c := range conds {
		assert.NotEqual(t, "Failed", c.(map[string]any)["type"], "the JobSet did not fail")
	}
	cur := &batchv1.Job{}
	require.NoError(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(job), cur), "JobSet kept its Job")
	assert.Equal(t, job.UID, cur.UID, "the Job was not recreated by a JobSet restart")
}

func node(t *testing.T, name string) string {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	require.NoError(t, env.c.Create(context.Background(), n))
	setNodeReady(t, name, corev1.ConditionTrue)
	return name
}

// setNodeReady writes the Ready condition as the node lifecycle controller
// would, changed an hour ago for a healthy node, now for a failing one.
func setNodeReady(t *testing.T, name string, status corev1.ConditionStatus) {
	t.Helper()
	since := time.Now().Add(-time.Hour)
	if status != corev1.ConditionTrue {
		since = time.Now()
	}
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := env.c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(since)}}
		return env.c.Status().Update(context.Background(), n)
	}))
}

func running(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Pod{}
		if err := env.c.Get(context.Background(), client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		cur.Status.Phase = corev1.PodRunning
		cur.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", Image: "example.com/pytorch:2.7.1", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		err := env.c.Status().Update(context.Background(), cur)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}))
}

// avoided lists the hostnames the pod's node affinity excludes, required or preferred.
func avoided(pod *corev1.Pod) []string {
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil {
		return nil
	}
	na := pod.Spec.Affinity.NodeAffinity
	var out []string
	add := func(exprs []corev1.NodeSelectorRequirement) {
		for _, e := range exprs {
			if e.Key == "kubernetes.io/hostname" && e.Operator == corev1.NodeSelectorOpNotIn {
				out = append(out, e.Values...)
			}
		}
	}
	if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			add(term.MatchExpressions)
		}
	}
	// A node that failed the job once is avoided by preference
	// (docs/rescheduler.md, "Which nodes a job avoids").
	for _, term := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		add(term.Preference.MatchExpressions)
	}
	return out
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
