package rescheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
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

const recordPrefix = contract.BadNodeRecordPrefix

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

// JobKeys finds the job of a pod by asking each kind's adapter
// (jobs.Adapter.JobOfPod), then the pod's controller owner. Build it once
// (NewJobKeys) where pods are looked up often.
type JobKeys struct {
	finders []*jobs.Adapter
}

// NewJobKeys asks the adapters of kinds.
func NewJobKeys(kinds jobs.Kinds) JobKeys {
	var k JobKeys
	for _, a := range kinds.All() {
		if a.JobOfPod != nil {
			k.finders = append(k.finders, a)
		}
	}
	return k
}

// Labels are the pod labels the finders read; the pod cache keeps them.
func (k JobKeys) Labels() []string {
	var out []string
	for _, f := range k.finders {
		out = append(out, f.JobLabels...)
	}
	return out
}

// Of returns the job of a pod: the job a kind's labels name when they
// agree with the pod (JobSet's, whose controller, a batch Job, is not the
// job; the operators' label for a pod without an owner reference), else
// the controller owner, else the pod itself. The caller must set
// pod.Namespace: an admission request may carry the namespace only in the
// request, not in the object.
func (k JobKeys) Of(pod *corev1.Pod) JobKey {
	ns := pod.Namespace
	for _, f := range k.finders {
		if o, ok := f.JobOfPod(pod); ok {
			return JobKey{Namespace: ns, APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name}
		}
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return JobKey{Namespace: ns, APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name}
	}
	return JobKey{Namespace: ns, APIVersion: "v1", Kind: "Pod", Name: pod.Name}
}

// JobKeyOf is JobKeys.Of for the built-in kinds.
func JobKeyOf(pod *corev1.Pod) JobKey { return NewJobKeys(jobs.Builtin()).Of(pod) }
