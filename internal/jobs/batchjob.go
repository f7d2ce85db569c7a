package jobs

import (
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// BatchJob is batch/v1 Job: a user's own Job, typically an Indexed Job of
// torchrun ranks behind a headless Service. Only a Job with no controller
// owner is this kind: the Jobs a CronJob or a JobSet (a TrainJob's) makes
// stay theirs, are left unchanged and their pods are injected as pods, as
// before. The Job controller names each pod's Job in
// batch.kubernetes.io/job-name, which names the checkpoint directory
// (job.batch/<name>); the Job owns its pods, so the rescheduler keys bad
// nodes by the Job and the outcome reader posts its Events there.
func BatchJob() *Adapter {
	of := batchv1.SchemeGroupVersion.WithKind("Job")
	return &Adapter{
		GVK:  of,
		Name: "job",
		Decode: Decoder(of, func(obj *batchv1.Job) (Job, error) {
			if metav1.GetControllerOf(obj) != nil {
				return controlledBatchJob{obj}, nil
			}
			return batchJob{obj}, nil
		}),
		Validate:         func(job Job, _ RuleEnv) Result { return batchJobRules(objectOf[batchv1.Job](job)) },
		NotMutated:       func(job Job) string { return controlledBatchJobNotMutated(objectOf[batchv1.Job](job)) },
		JobNameLabels:    []JobNameLabel{NameLabel(contract.EnvBatchJobName, batchv1.JobNameLabel)},
		PodOwnerChain:    []schema.GroupVersionKind{of},
		UncontrolledOnly: true,
	}
}

type batchJob struct{ *batchv1.Job }

func (j batchJob) Object() any              { return j.Job }
func (j batchJob) Meta() *metav1.ObjectMeta { return &j.ObjectMeta }
func (j batchJob) Templates() []Template {
	// The Job controller copies the template as it is: its restartPolicy
	// (Never or OnFailure, the API server requires one) is the pods'.
	return []Template{{Path: field.NewPath("spec", "template"), Meta: &j.Spec.Template.ObjectMeta, Spec: &j.Spec.Template.Spec,
		PodRestartPolicy: j.Spec.Template.Spec.RestartPolicy}}
}

// Elastic: a Job's pod count is fixed (parallelism); torchrun inside may
// still be elastic, which the Job does not know.
func (j batchJob) Elastic() Elastic { return Elastic{} }

// controlledBatchJob is a Job another controller made. It shows no
// templates, so nothing checks or injects them at the Job: its pods are
// handled as pods, exactly as before the Job was a kind.
type controlledBatchJob struct{ *batchv1.Job }

func (j controlledBatchJob) Object() any              { return j.Job }
func (j controlledBatchJob) Meta() *metav1.ObjectMeta { return &j.ObjectMeta }
func (j controlledBatchJob) Templates() []Template    { return nil }
func (j controlledBatchJob) Elastic() Elastic         { return Elastic{} }

// controlledBatchJobNotMutated: a Job another controller made is left to
// it; "" for a user's own Job.
func controlledBatchJobNotMutated(job *batchv1.Job) string {
	ref := metav1.GetControllerOf(job)
	if ref == nil {
		return ""
	}
	return "a Job controlled by " + ref.Kind + " " + ref.Name + " is its controller's; trainguard injects its pods instead"
}

// batchJobRules: a Job's own failure accounting decides whether the pods
// trainguard moves off a failing or drained node come back, so the rules
// warn where it would count them as failures. A controlled Job is its
// controller's, checked at the pod.
func batchJobRules(job *batchv1.Job) Result {
	metaPath, specPath := field.NewPath("metadata"), field.NewPath("spec")
	res := Result{Errors: contract.ValidateMetadata(&job.ObjectMeta, metaPath)}
	if metav1.GetControllerOf(job) != nil {
		return res
	}
	res.Errors = append(res.Errors, contract.ValidateMetadata(&job.Spec.Template.ObjectMeta, specPath.Child("template", "metadata"))...)
	if w := batchDisruptionWarning(&job.Spec, specPath.Child("podFailurePolicy")); w != "" {
		res.Warnings = append(res.Warnings, w)
	}
	if w := batchCompletionModeWarning(&job.Spec, specPath); w != "" {
		res.Warnings = append(res.Warnings, w)
	}
	if w := batchBackoffWarning(&job.Spec, specPath); w != "" {
		res.Warnings = append(res.Warnings, w)
	}
	return res
}

// batchDisruptionWarning: a pod evicted by a drain, by a preemption or by
// trainguard's rescheduler gets the DisruptionTarget condition. The first
// podFailurePolicy rule matching it decides; unless it is Ignore (or there
// is no policy, which counts every failed pod), the move counts against
// backoffLimit, and enough moves fail the Job.
func batchDisruptionWarning(spec *batchv1.JobSpec, pfpPath *field.Path) string {
	fix := "add podFailurePolicy.rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget, status: \"True\"}]}] first (it needs restartPolicy: Never)"
	if spec.PodFailurePolicy == nil {
		return fmt.Sprintf("%s: not set, so every pod evicted by a drain, a preemption or trainguard's rescheduler counts against backoffLimit and can fail the Job; %s", pfpPath, fix)
	}
	for i, r := range spec.PodFailurePolicy.Rules {
		if !slices.ContainsFunc(r.OnPodConditions, func(c batchv1.PodFailurePolicyOnPodConditionsPattern) bool {
			return c.Type == corev1.DisruptionTarget && (c.Status == "" || c.Status == corev1.ConditionTrue)
		}) {
			continue
		}
		if r.Action == batchv1.PodFailurePolicyActionIgnore {
			return ""
		}
		return fmt.Sprintf("%s: action %s on DisruptionTarget counts a drained, preempted or rescheduled pod as a failure; make it Ignore", pfpPath.Child("rules").Index(i).Child("action"), r.Action)
	}
	return fmt.Sprintf("%s: no rule matches the DisruptionTarget condition, so every pod evicted by a drain, a preemption or trainguard's rescheduler counts against backoffLimit; %s", pfpPath.Child("rules"), fix)
}

// batchCompletionModeWarning: torchrun ranks of a multi-pod Job need a
// stable rank each (JOB_COMPLETION_INDEX) and a stable hostname for the
// rendezvous; a NonIndexed Job's replacement pod has neither, so it can
// neither find its peers nor resume its own rank's checkpoint.
func batchCompletionModeWarning(spec *batchv1.JobSpec, specPath *field.Path) string {
	if spec.CompletionMode != nil && *spec.CompletionMode == batchv1.IndexedCompletion {
		return ""
	}
	if spec.Completions == nil || *spec.Completions <= 1 || !runsTorchrun(&spec.Template.Spec) {
		return ""
	}
	return fmt.Sprintf("%s: %d completions of torchrun without completionMode: Indexed give the ranks no stable index (JOB_COMPLETION_INDEX) or hostname, so a rescheduled rank cannot rejoin or resume its checkpoint; set completionMode: Indexed",
		specPath.Child("completionMode"), *spec.Completions)
}

// batchBackoffWarning: a rescheduled pod that failed (an exit code the
// rescheduler retries) counts against the Job's limit; a limit of 0 fails
// the whole Job at the first one.
func batchBackoffWarning(spec *batchv1.JobSpec, specPath *field.Path) string {
	switch {
	case spec.BackoffLimitPerIndex != nil && *spec.BackoffLimitPerIndex < 1:
		return fmt.Sprintf("%s: %d fails an index at its first failed pod, before trainguard can reschedule it; set it to at least 1",
			specPath.Child("backoffLimitPerIndex"), *spec.BackoffLimitPerIndex)
	case spec.BackoffLimitPerIndex == nil && spec.BackoffLimit != nil && *spec.BackoffLimit < 1:
		return fmt.Sprintf("%s: %d fails the Job at its first failed pod, before trainguard can reschedule it; set it to at least 1",
			specPath.Child("backoffLimit"), *spec.BackoffLimit)
	}
	return ""
}

// runsTorchrun: a container starts torchrun (or python -m torch.distributed.run).
func runsTorchrun(spec *corev1.PodSpec) bool {
	for _, c := range spec.Containers {
		for _, a := range slices.Concat(c.Command, c.Args) {
			if strings.Contains(a, "torchrun") || strings.Contains(a, "torch.distributed.run") {
				return true
			}
		}
	}
	return false
}
