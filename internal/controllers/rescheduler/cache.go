package rescheduler

import (
	"slices"
	"strings"
	"unique"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// CacheByObject returns the cache settings the manager must be created with.
// Memory must not grow with what tenants write:
//   - ConfigMaps come from trainguard's own namespace only (namespace), and
//     only labelled records: a tenant's ConfigMap is never even seen.
//   - Pods carry the managed label (which anyone can set, hence the opt-in
//     check in Reconcile), and are stripped by TransformPod to the fields
//     the rescheduler reads.
//   - Nodes are stripped by TransformNode (no images, no addresses).
//
// kinds are the job kinds served: the pod labels their KeyOf reads are kept.
func CacheByObject(namespace string, kinds jobs.Kinds) map[client.Object]cache.ByObject {
	var namespaces map[string]cache.Config
	if namespace != "" { // "" would mean every namespace; Setup refuses it
		namespaces = map[string]cache.Config{namespace: {}}
	}
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}: {
			Label:     labels.SelectorFromSet(labels.Set{contract.LabelManaged: "true"}),
			Transform: TransformPod(kinds),
		},
		&corev1.ConfigMap{}: {
			Label:      labels.SelectorFromSet(labels.Set{contract.LabelBadNodes: "true"}),
			Namespaces: namespaces,
		},
		&corev1.Node{}: {Transform: TransformNode},
		// Node Leases: only kube-node-lease, stripped to name and renewTime.
		&coordinationv1.Lease{}: {
			Namespaces: map[string]cache.Config{NodeLeaseNamespace: {}},
			Transform:  TransformLease,
		},
	}
}

// keptLabels says whether the rescheduler reads a pod label: its own, and
// those the kinds find a pod's job by (jobLabels).
func keptLabels(jobLabels []string) func(string) bool {
	return func(k string) bool {
		return k == contract.LabelManaged || k == contract.LabelMindClusterFaultScheduling || slices.Contains(jobLabels, k)
	}
}

// keptAnnotation says whether the rescheduler reads a pod annotation: the
// trainguard.io/ policy overrides and MindCluster's recover strategy.
func keptAnnotation(k string) bool {
	return strings.HasPrefix(k, contract.Prefix) || k == contract.AnnotationMindClusterRecoverStrategy
}

// maxKeptMessage bounds the status messages kept (the kubelet's are short;
// anything longer is cut, it only ends up in an Event).
const maxKeptMessage = 256

// TransformPod keeps only what Decide, kinds.KeyOf and the controller
// read. Everything else a tenant can make large (env, volumes, commands,
// images, unrelated labels and annotations) is dropped before it is
// cached. A pod that is not a *corev1.Pod (a tombstone) passes unchanged.
func TransformPod(kinds jobs.Kinds) toolscache.TransformFunc {
	kept := keptLabels(kinds.JobLabels())
	return func(obj any) (any, error) { return transformPod(obj, kept) }
}

func transformPod(obj any, keptLabel func(string) bool) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: pod.TypeMeta}
	m := &out.ObjectMeta
	m.Name, m.Namespace, m.UID, m.ResourceVersion = pod.Name, intern(pod.Namespace), pod.UID, pod.ResourceVersion
	m.DeletionTimestamp, m.DeletionGracePeriodSeconds = pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds
	// A pod created after its node was recorded that fails there again
	// makes the node's avoidance required (Record.AddNode).
	m.CreationTimestamp = pod.CreationTimestamp
	m.Labels = filterMap(pod.Labels, keptLabel)
	m.Annotations = filterMap(pod.Annotations, keptAnnotation)
	if ref := metav1.GetControllerOf(pod); ref != nil {
		m.OwnerReferences = []metav1.OwnerReference{internRef(ref)}
	}
	out.Spec.NodeName = intern(pod.Spec.NodeName)
	out.Spec.RestartPolicy = pod.Spec.RestartPolicy
	out.Spec.TerminationGracePeriodSeconds = pod.Spec.TerminationGracePeriodSeconds
	// The priority-boost controller reads the trainer's status at the
	// pod's IP (never a host-network pod's, which is the node's).
	out.Spec.HostNetwork = pod.Spec.HostNetwork
	out.Spec.Containers = make([]corev1.Container, len(pod.Spec.Containers))
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		// Its restart policy and rules: whether the kubelet restarts a
		// process fault in place (contract.RestartsInPlace).
		out.Spec.Containers[i].Name, out.Spec.Containers[i].RestartPolicy, out.Spec.Containers[i].RestartPolicyRules = intern(c.Name), c.RestartPolicy, c.RestartPolicyRules
	}
	out.Status = transformPodStatus(&pod.Status)
	return out, nil
}

func transformPodStatus(s *corev1.PodStatus) corev1.PodStatus {
	out := corev1.PodStatus{Phase: s.Phase, Reason: intern(s.Reason), Message: truncate(s.Message), PodIP: s.PodIP, StartTime: s.StartTime}
	for _, c := range s.Conditions {
		if c.Type == corev1.DisruptionTarget {
			out.Conditions = append(out.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason})
		}
	}
	// Only terminated or crash-looping containers say anything to
	// classifyTermination, and only a previous run's checkpoint outcome
	// line to the outcome reader; any other running container's status is
	// dropped.
	for _, cs := range s.ContainerStatuses {
		if !statusWorthKeeping(&cs) {
			continue
		}
		out.ContainerStatuses = append(out.ContainerStatuses, corev1.ContainerStatus{
			Name:                 cs.Name,
			RestartCount:         cs.RestartCount,
			State:                transformState(cs.State),
			LastTerminationState: transformState(cs.LastTerminationState),
		})
	}
	return out
}

func statusWorthKeeping(cs *corev1.ContainerStatus) bool {
	switch {
	case cs.State.Terminated != nil:
		return true
	case cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff":
		return true
	}
	last := cs.LastTerminationState.Terminated
	return last != nil && keptMessage(last.Message) != ""
}

func transformState(s corev1.ContainerState) corev1.ContainerState {
	var out corev1.ContainerState
	if s.Waiting != nil {
		out.Waiting = &corev1.ContainerStateWaiting{Reason: s.Waiting.Reason}
	}
	if s.Running != nil {
		out.Running = &corev1.ContainerStateRunning{}
	}
	if t := s.Terminated; t != nil {
		out.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Signal: t.Signal, Reason: t.Reason,
			Message: keptMessage(t.Message)}
	}
	return out
}

// keptMessage is what the cache keeps of a termination message, bounded:
// the supervisor's in-process restarts (classify counts them toward the
// job's in-place cap), then the agent's checkpoint outcome line (for the
// outcome reader that shares this cache).
func keptMessage(message string) string {
	restarts, outcome := contract.InProcessRestartsLine(message), contract.CheckpointOutcomeLine(message)
	if restarts == "" || outcome == "" {
		return restarts + outcome
	}
	return restarts + "\n" + outcome
}

// TransformNode keeps the node's name, zone labels, cordon state,
// conditions and taints: what classifyNode and the zone brake read, and
// the warnings the node-warning controller (sharing this cache) listens
// to. Images, addresses and heartbeats, the bulk of a Node, are dropped.
func TransformNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{TypeMeta: node.TypeMeta}
	m := &out.ObjectMeta
	m.Name, m.UID, m.ResourceVersion, m.CreationTimestamp = node.Name, node.UID, node.ResourceVersion, node.CreationTimestamp
	m.DeletionTimestamp = node.DeletionTimestamp
	m.Labels = filterMap(node.Labels, func(k string) bool { return k == corev1.LabelTopologyZone || k == corev1.LabelFailureDomainBetaZone })
	out.Spec.Unschedulable = node.Spec.Unschedulable
	// Every condition, not only Ready: a node carries a handful, written
	// by the kubelet and node agents (never a tenant), and which of them
	// warn is a setting.
	for _, c := range node.Status.Conditions {
		out.Status.Conditions = append(out.Status.Conditions, corev1.NodeCondition{
			Type: corev1.NodeConditionType(intern(string(c.Type))), Status: c.Status, Reason: intern(c.Reason), LastTransitionTime: c.LastTransitionTime,
		})
	}
	for _, t := range node.Spec.Taints {
		out.Spec.Taints = append(out.Spec.Taints, corev1.Taint{Key: intern(t.Key), Value: intern(t.Value), Effect: t.Effect})
	}
	return out, nil
}

// filterMap keeps the entries of in whose key passes keep, interned: the
// same keys and values (a job's name, "true") recur on every pod.
func filterMap(in map[string]string, keep func(string) bool) map[string]string {
	var out map[string]string
	for k, v := range in {
		if keep(k) {
			if out == nil {
				out = map[string]string{}
			}
			out[intern(k)] = intern(v)
		}
	}
	return out
}

// intern returns the canonical copy of s (package unique), so a string
// that recurs across cached objects (a namespace, a node's or a job's
// name, a label key) is held once, not once per pod as the decoder made
// it. unique holds its canonical copies weakly: a string no cached object
// refers to any more is dropped, so tenant-chosen values cannot make the
// table grow beyond what the cache holds anyway.
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// internRef copies a pod's controller reference with its strings
// interned: every pod of a job has the same one.
func internRef(ref *metav1.OwnerReference) metav1.OwnerReference {
	out := *ref
	out.APIVersion, out.Kind, out.Name, out.UID = intern(ref.APIVersion), intern(ref.Kind), intern(ref.Name), types.UID(intern(string(ref.UID)))
	return out
}

func truncate(s string) string {
	if len(s) > maxKeptMessage {
		return s[:maxKeptMessage] + "..."
	}
	return s
}
