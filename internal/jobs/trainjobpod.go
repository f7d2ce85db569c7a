package jobs

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
)

// TrainJobPodClaim is what a pod's labels claim about its TrainJob. Labels
// are tenant-writable, so a claim is only a question: the caller must read
// the TrainJob it names (in the pod's own namespace) before acting on it.
type TrainJobPodClaim struct {
	// TrainJob is the name of the TrainJob (= JobSet) the pod claims to belong to.
	TrainJob string
	// ReplicatedJob is the runtime's replicated job ("node" for the trainer).
	ReplicatedJob string
}

// TrainJobPod reports whether a pod looks like a trainer pod of a
// TrainJob: JobSet's labels name a JobSet and a replicated job, the pod is
// not an initializer (Trainer's ancestor label, when present, says
// trainer), and a container is named node, Trainer's trainer container.
// skip says why a JobSet pod is not a trainer pod; ok false with an empty
// skip means the pod is not a JobSet pod at all.
func TrainJobPod(pod *corev1.Pod) (claim TrainJobPodClaim, ok bool, skip string) {
	name, rjob := pod.Labels[trainerv1alpha1.LabelJobSetName], pod.Labels[trainerv1alpha1.LabelJobSetReplicatedJob]
	if name == "" || rjob == "" {
		return claim, false, ""
	}
	// A name that cannot be a TrainJob's is never looked up.
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return claim, false, "label " + trainerv1alpha1.LabelJobSetName + " is not a valid object name"
	}
	if a, set := pod.Labels[trainerv1alpha1.LabelTrainJobAncestor]; set && a != trainerv1alpha1.AncestorTrainer {
		return claim, false, "pod of the TrainJob's " + a + " step, not its trainer"
	}
	if !podspec.HasContainer(&pod.Spec, trainerv1alpha1.Node) {
		return claim, false, "JobSet pod without a container named " + trainerv1alpha1.Node + " (not a Trainer v2 trainer pod)"
	}
	return TrainJobPodClaim{TrainJob: name, ReplicatedJob: rjob}, true, ""
}

// MergeTrainJobAnnotations returns the annotations a TrainJob pod's policy
// is resolved from: the TrainJob's, with the pod's own on top (the pod is
// the more specific object, as a template's annotations are for a
// PyTorchJob's). An opt-out on either wins: opting out only ever narrows.
func MergeTrainJobAnnotations(trainJob, pod map[string]string) map[string]string {
	out := make(map[string]string, len(trainJob)+len(pod))
	for k, v := range trainJob {
		out[k] = v
	}
	for k, v := range pod {
		out[k] = v
	}
	if contract.OptedOut(trainJob) {
		out[contract.AnnotationInject] = contract.InjectDisabled
	}
	return out
}
