package rescheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/apis/kubeflow/v1"
)

// JobKey identifies the job a pod belongs to: its controller owner, or the
// pod itself when it has none (a bare pod).
type JobKey struct {
	Namespace string
	// APIVersion and Kind of the owner; "v1", "Pod" for a bare pod.
	APIVersion string
	Kind       string
	Name       string
}

// Bare says the pod has no controller: trainguard itself recreates it.
func (k JobKey) Bare() bool { return k.APIVersion == "v1" && k.Kind == "Pod" }

// String is the key as written in logs and in the record.
func (k JobKey) String() string {
	return k.Namespace + "/" + k.Kind + "." + k.group() + "/" + k.Name
}

func (k JobKey) group() string {
	gv, err := schema.ParseGroupVersion(k.APIVersion)
	if err != nil {
		return k.APIVersion
	}
	return gv.Group
}

// RecordName is the name of the job's bad-node ConfigMap in trainguard's
// namespace. A hash of the full identity (namespace included) keeps jobs of
// different namespaces and kinds (or a bare pod and a job) with the same
// name apart, and keeps the name valid whatever its length; the readable
// part is for humans only.
func (k JobKey) RecordName() string {
	sum := sha256.Sum256([]byte(k.Namespace + "/" + k.Kind + "." + k.group() + "/" + k.Name))
	suffix := hex.EncodeToString(sum[:])[:16]
	name := strings.ToLower(k.Namespace + "." + k.Name)
	const maxName = 253 - len(recordPrefix) - 1 - 16
	if len(name) > maxName {
		name = strings.TrimRight(name[:maxName], "-.")
	}
	return recordPrefix + name + "-" + suffix
}

const recordPrefix = "bad-nodes-"

// parseJobKey reverses String, given the APIVersion it does not hold.
func parseJobKey(s, apiVersion string) (JobKey, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return JobKey{}, false
	}
	kind, group, ok := strings.Cut(parts[1], ".")
	if !ok || kind == "" {
		return JobKey{}, false
	}
	k := JobKey{Namespace: parts[0], APIVersion: apiVersion, Kind: kind, Name: parts[2]}
	if k.group() != group {
		return JobKey{}, false
	}
	return k, true
}

// JobKeyOf returns the job of a pod. The controller owner wins; operator
// labels are the fallback for pods whose owner reference is not set. The
// caller must set pod.Namespace: an admission request may carry the
// namespace only in the request, not in the object.
func JobKeyOf(pod *corev1.Pod) JobKey {
	ns := pod.Namespace
	if k, ok := jobSetKeyOf(pod); ok { // JobSet (Trainer v2) pods: see jobset.go
		return k
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return JobKey{Namespace: ns, APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name}
	}
	if name := pod.Labels[labelKubeflowJobName]; name != "" {
		return JobKey{Namespace: ns, APIVersion: kubeflowv1.GroupVersion.String(), Kind: kubeflowv1.Kind, Name: name}
	}
	if name := pod.Labels[labelJobName]; name != "" {
		gv := kubeflowv1.GroupVersion
		if pod.Labels[labelGroupName] == kubedlv1alpha1.GroupVersion.Group {
			gv = kubedlv1alpha1.GroupVersion
		}
		return JobKey{Namespace: ns, APIVersion: gv.String(), Kind: kubeflowv1.Kind, Name: name}
	}
	return JobKey{Namespace: ns, APIVersion: "v1", Kind: "Pod", Name: pod.Name}
}
