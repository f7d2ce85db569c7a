package rescheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/testing/builders"
	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// trainJobPod builds what Trainer, JobSet and the Job controller would for
// a TrainJob named name with the given annotations, and returns the
// TrainJob, its JobSet and the pod (on node, admitted by the webhook).
func trainJobPod(t *testing.T, ns, name, node string, annotations map[string]string) (tj, js *unstructured.Unstructured, pod *corev1.Pod) {
	t.Helper()
	tjw := builders.MakeTrainJob(ns, name)
	for k, v := range annotations {
		tjw.WithAnnotation(k, v)
	}
	tj = create(t, tjw.Unstructured())
	js = create(t, builders.MakeJobSet(ns, name).WithOwner(controllerRef(tj)).Unstructured())
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: jobs.JobSetJobName(name, "node", "0"), OwnerReferences: []metav1.OwnerReference{controllerRef(js)}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "node", Image: "example.com/train:1"}},
		}}},
	}
	require.NoError(t, env.c.Create(context.Background(), job))
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: job.Name + "-abcde",
			Labels: map[string]string{
				"jobset.sigs.k8s.io/jobset-name":        name,
				"jobset.sigs.k8s.io/replicatedjob-name": "node",
				"jobset.sigs.k8s.io/job-index":          "0",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "node", Image: "example.com/train:1"}}},
	}
	require.Eventually(t, func() bool { // the webhook's TrainJob informer may lag a moment
		p := pod.DeepCopy()
		return env.c.Create(context.Background(), p, client.DryRunAll) == nil && p.Labels[contract.LabelManaged] == "true"
	}, waitFor, tick, "the pod webhook injects the TrainJob's pod")
	require.NoError(t, env.c.Create(context.Background(), pod))
	return tj, js, pod
}

func create(t *testing.T, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	require.NoError(t, env.c.Create(context.Background(), u))
	return u
}

func controllerRef(o *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Name: o.GetName(), UID: o.GetUID(), Controller: ptr.To(true)}
}

// annotationsOf reads an object's annotations as the API server has them.
func annotationsOf(t *testing.T, o *unstructured.Unstructured) map[string]string {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	require.NoError(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(o), got))
	return got.GetAnnotations()
}

// capReachedOnTrainJob runs a TrainJob whose cap is 0 into a lost node and
// checks the rescheduler read the cap from the TrainJob, left the pod
// alone, said so, and marked the TrainJob (not its JobSet).
func capReachedOnTrainJob(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	node := readyNode(t, ns, "a")
	tj, js, pod := trainJobPod(t, ns, "llm", node, map[string]string{contract.AnnotationMaxReschedules: "0"})
	setNodeReady(t, node, corev1.ConditionFalse, time.Now().Add(-time.Minute))
	e := waitEvent(t, pod, resched.ReasonRescheduleCapReached)
	assert.Contains(t, e.Note, "(0/0)", "the TrainJob's cap of 0 applies")
	require.Eventually(t, func() bool { return annotationsOf(t, tj)[contract.AnnotationReschedulesExhausted] == "0" },
		waitFor, tick, "the TrainJob is marked at its cap")
	assert.NotContains(t, annotationsOf(t, js), contract.AnnotationReschedulesExhausted, "the JobSet is not the job")
	cur := getPod(t, pod)
	require.NotNil(t, cur)
	assert.Nil(t, cur.DeletionTimestamp, "nothing is evicted past the cap")
	return pod
}

// TestTrainJobCapIsReadFromAndMarkedOnTheTrainJob: a
// TrainJob pod's job is its TrainJob, reached Pod -> Job -> JobSet ->
// TrainJob. Before, the rescheduler read and patched the JobSet: the
// TrainJob's trainguard.io/max-reschedules was never read, and the mark
// landed on the JobSet (under the chart's RBAC, not at all: see below).
func TestTrainJobCapIsReadFromAndMarkedOnTheTrainJob(t *testing.T) {
	capReachedOnTrainJob(t, namespace(t))
}

// TestTrainJobCapUnderTheChartsRBAC runs the rescheduler as trainguard's
// ServiceAccount with the RBAC the chart renders for a cluster with
// Trainer: it may read and mark the TrainJob, and does, with no
// JobNotAccessible Event and no reconcile error. Before, the JobSet patch
// was Forbidden, the reconcile failed and was retried for ever, and the
// RescheduleCapReached Event was never sent.
func TestTrainJobCapUnderTheChartsRBAC(t *testing.T) {
	user, groups := installChartRBAC(t)
	env.replaceShared(t)
	m := env.startManagerForTest(t, managerOptions{Rescheduler: defaultOptions(), ImpersonateUser: user, ImpersonateGroups: groups})
	pod := capReachedOnTrainJob(t, namespace(t))
	assert.NotContains(t, reasons(podEvents(t, pod)), resched.ReasonJobNotAccessible)
	assert.NotContains(t, m.logText(t), "Reconciler error", "no reconcile failed")
}

// installChartRBAC creates the ServiceAccount and RBAC the chart renders
// with Trainer support and returns the identity to impersonate.
func installChartRBAC(t *testing.T) (string, []string) {
	t.Helper()
	helm, err := chart.HelmBin()
	require.NoError(t, err)
	dir, err := chart.Dir()
	require.NoError(t, err)
	objs, err := chart.RenderWith(helm, dir, controlplane.ReleaseName, controlplane.Namespace, "--api-versions", "trainer.kubeflow.org/v1alpha1")
	require.NoError(t, err)
	var sa string
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			sa = o.GetName()
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		require.NoError(t, env.c.Create(context.Background(), o.DeepCopy()), "creating %s %s", o.GetKind(), o.GetName())
		t.Cleanup(func() { _ = env.c.Delete(context.Background(), o.DeepCopy()) })
	}
	require.NotEmpty(t, sa, "the chart renders trainguard's ServiceAccount")
	ns := controlplane.Namespace
	return "system:serviceaccount:" + ns + ":" + sa, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}
