package rescheduler

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Pods of a JobSet (Kubeflow Trainer v2's TrainJobs run on JobSet) are
// owned by a batch Job, one per replicated-job index; the job the
// rescheduler must reason about is the JobSet (named after its TrainJob):
// a node bad for one of its pods is bad for all of them, as for the
// replicas of a PyTorchJob, and the record must outlive the Job, which
// JobSet recreates when it restarts. These functions are pure; the
// controller calls jobSetKeyOf from JobKeyOf.

// JobSet's pod labels (sigs.k8s.io/jobset v0.8).
const (
	labelJobSetName          = "jobset.sigs.k8s.io/jobset-name"
	labelJobSetReplicatedJob = "jobset.sigs.k8s.io/replicatedjob-name"
	labelJobSetJobIndex      = "jobset.sigs.k8s.io/job-index"
	jobSetAPIVersion         = "jobset.x-k8s.io/v1alpha2"
	jobSetKind               = "JobSet"
)

// jobSetKeyOf returns the JobSet a pod belongs to. Labels are
// tenant-writable, so they are believed only when they agree with the pod's
// controller: a batch/v1 Job named as JobSet names its Jobs
// (<jobset>-<replicated job>-<index>). A pod whose labels claim another
// JobSet than its owner's keeps its owner's identity.
func jobSetKeyOf(pod *corev1.Pod) (JobKey, bool) {
	name, rjob, idx := pod.Labels[labelJobSetName], pod.Labels[labelJobSetReplicatedJob], pod.Labels[labelJobSetJobIndex]
	if name == "" || rjob == "" || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return JobKey{}, false
	}
	if _, err := strconv.Atoi(idx); err != nil {
		return JobKey{}, false
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.APIVersion != "batch/v1" || ref.Kind != "Job" || ref.Name != JobSetJobName(name, rjob, idx) {
		return JobKey{}, false
	}
	return JobKey{Namespace: pod.Namespace, APIVersion: jobSetAPIVersion, Kind: jobSetKind, Name: name}, true
}

// JobSetJobName is the name JobSet gives the Job of a replicated job's index.
func JobSetJobName(jobSet, replicatedJob, index string) string {
	return jobSet + "-" + replicatedJob + "-" + index
}
