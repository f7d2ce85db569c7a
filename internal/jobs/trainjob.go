package jobs

import (
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

// TrainJob is trainer.kubeflow.org/v1alpha1 TrainJob. A TrainJob holds no
// pod template (its pods come from the runtime's), so it has no templates
// and is validated only; its pods are injected (TrainJobPod). Its pods run
// in JobSet's batch Jobs, so the rescheduler finds their job, the JobSet
// named after the TrainJob, by JobSet's labels (jobSetOfPod).
func TrainJob() *Adapter {
	gvk := trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind)
	return &Adapter{
		GVK:    gvk,
		Name:   "trainjob",
		Decode: Decoder(gvk, func(obj *trainerv1alpha1.TrainJob) (Job, error) { return trainJob{obj}, nil }),
		Validate: func(job Job, env RuleEnv) Result {
			return trainJobRules(objectOf[trainerv1alpha1.TrainJob](job), env)
		},
		ValidateUpdate: func(cur, old Job) field.ErrorList {
			return validateTrainJobUpdate(objectOf[trainerv1alpha1.TrainJob](cur), objectOf[trainerv1alpha1.TrainJob](old))
		},
		NotMutated: func(Job) string {
			return "a TrainJob carries no pod template (its pods come from the runtime); trainguard injects its trainer pods instead"
		},
		JobOfPod: jobSetOfPod,
		JobLabels: []string{trainerv1alpha1.LabelJobSetName, trainerv1alpha1.LabelJobSetReplicatedJob,
			trainerv1alpha1.LabelJobSetJobIndex},
		PodOwnerChain: []schema.GroupVersionKind{batchv1.SchemeGroupVersion.WithKind("Job"),
			schema.FromAPIVersionAndKind(trainerv1alpha1.JobSetAPIVersion, trainerv1alpha1.JobSetKind),
			trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind)},
	}
}

type trainJob struct{ *trainerv1alpha1.TrainJob }

func (j trainJob) Object() any              { return j.TrainJob }
func (j trainJob) Meta() *metav1.ObjectMeta { return &j.ObjectMeta }
func (j trainJob) Templates() []Template    { return nil }

// Elastic: a TrainJob's elastic policy lives in its runtime.
func (j trainJob) Elastic() Elastic { return Elastic{} }

// jobSetOfPod returns the JobSet a pod belongs to. Pods of a JobSet are
// owned by a batch Job, one per replicated-job index; the job the
// rescheduler must reason about is the JobSet: a node bad for one of its
// pods is bad for all of them, and the record must outlive the Job, which
// JobSet recreates when it restarts. Labels are tenant-writable, so they
// are believed only when they agree with the pod's controller: a batch/v1
// Job named as JobSet names its Jobs (<jobset>-<replicated job>-<index>).
// A pod whose labels claim another JobSet than its owner's keeps its
// owner's identity.
func jobSetOfPod(pod *corev1.Pod) (PodOwner, bool) {
	name := pod.Labels[trainerv1alpha1.LabelJobSetName]
	rjob, idx := pod.Labels[trainerv1alpha1.LabelJobSetReplicatedJob], pod.Labels[trainerv1alpha1.LabelJobSetJobIndex]
	if name == "" || rjob == "" || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return PodOwner{}, false
	}
	if _, err := strconv.Atoi(idx); err != nil {
		return PodOwner{}, false
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.APIVersion != "batch/v1" || ref.Kind != "Job" || ref.Name != JobSetJobName(name, rjob, idx) {
		return PodOwner{}, false
	}
	return PodOwner{APIVersion: trainerv1alpha1.JobSetAPIVersion, Kind: trainerv1alpha1.JobSetKind, Name: name}, true
}

// JobSetJobName is the name JobSet gives the Job of a replicated job's index.
func JobSetJobName(jobSet, replicatedJob, index string) string {
	return jobSet + "-" + replicatedJob + "-" + index
}
