package rescheduler

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// keyOf is the job of pod among the built-in kinds, as serve finds it.
func keyOf(pod *corev1.Pod) jobs.Key { return jobs.Builtin().KeyOf(pod) }

// stripPod is the pod cache's transform for the built-in kinds.
func stripPod(obj any) (any, error) { return TransformPod(jobs.Builtin())(obj) }

// t0 is the tests' "now".
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

type podOpt func(*corev1.Pod)

// newPod is a running, managed kubeflow worker on node n1.
func newPod(opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "team", Name: "job-worker-0", UID: "uid-1",
			Labels: map[string]string{contract.LabelManaged: "true", kubeflowv1.LabelJobName: "job"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "job", UID: "job-uid", Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:   "n1",
			Containers: []corev1.Container{{Name: "pytorch", Image: "trainer"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// bare makes it a bare pod, carrying the marker the webhook gave it.
func bare(p *corev1.Pod) {
	p.Name = "elastic-0"
	p.OwnerReferences = nil
	p.Labels = map[string]string{contract.LabelManaged: "true"}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[contract.AnnotationInjected] = contract.InjectionPreStop
}

func label(k, v string) podOpt { return func(p *corev1.Pod) { p.Labels[k] = v } }

func annotation(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func exited(code int32, reason string) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name:  "pytorch",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}},
		}}
	}
}

// crashLooping: the training container exited with code and the kubelet
// is backing off its restart number restarts+1; the pod still runs.
func crashLooping(code, restarts int32) podOpt {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "pytorch", RestartCount: restarts,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}}}}
	}
}

// terminatedRunning: the training container just exited with code, before
// the kubelet restarted it; the pod still runs.
func terminatedRunning(code, restarts int32) podOpt {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "pytorch", RestartCount: restarts,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}}}}
	}
}

func restartPolicy(rp corev1.RestartPolicy) podOpt {
	return func(p *corev1.Pod) { p.Spec.RestartPolicy = rp }
}

// rules gives the training container the pod mutator's in-place restart rules.
func rules(p *corev1.Pod) {
	never := corev1.ContainerRestartPolicyNever
	p.Spec.Containers[0].RestartPolicy = &never
	p.Spec.Containers[0].RestartPolicyRules = contract.InPlaceRestartRules()
}

func podReason(reason string) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason = reason
	}
}

func disruption(p *corev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI",
	})
}

// terminating marks the pod deleted gracefully (30 s) `ago` before t0.
func terminating(ago time.Duration) podOpt {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: t0.Add(-ago).Add(30 * time.Second)}
		p.DeletionGracePeriodSeconds = ptr.To[int64](30)
	}
}

// newNode has Ready=status since `since` before t0.
func newNode(name string, status corev1.ConditionStatus, since time.Duration) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("node-" + name), CreationTimestamp: metav1.Time{Time: t0.Add(-24 * time.Hour)}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.Time{Time: t0.Add(-since)},
		}}},
	}
}

func readyNode() *corev1.Node { return newNode("n1", corev1.ConditionTrue, time.Hour) }

func cordoned(n *corev1.Node) *corev1.Node { n.Spec.Unschedulable = true; return n }

// newReconciler is the reconciler under test on the harness's fake client.
// The fake has no informer: the carrier index is made from a List with the
// index's own function.
func (h *harness) newReconciler() *Reconciler {
	kinds := h.kinds
	if len(kinds.All()) == 0 {
		kinds = jobs.Builtin()
	}
	return newReconciler(h.c, h.c, h.events, h.clock, testConfig(), kinds, ownNS, newMetrics(), listedCarrierKeys(h.c))
}

// listedCarrierKeys is IndexCarrier's values, read by listing every pod.
func listedCarrierKeys(c client.Reader) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods); err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		var keys []string
		for i := range pods.Items {
			ks, _ := carrierKey(&pods.Items[i])
			for _, k := range ks {
				if !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
		}
		return keys, nil
	}
}
