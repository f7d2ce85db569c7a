package builders

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// BatchJobWrapper builds a batch/v1 Job.
type BatchJobWrapper struct{ batchv1.Job }

// MakeBatchJob is the Job users write for torchrun ranks, with nothing for
// trainguard to warn about: Indexed, 2 completions in parallel, a
// podFailurePolicy ignoring disruptions (so restartPolicy Never), the
// default backoffLimit, one pytorch container.
func MakeBatchJob(ns, name string) *BatchJobWrapper {
	tpl := Template(Container("pytorch"))
	tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &BatchJobWrapper{batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions:    Ptr[int32](2),
			Parallelism:    Ptr[int32](2),
			CompletionMode: Ptr(batchv1.IndexedCompletion),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
			Template: tpl,
		},
	}}
}

// With applies f to the Job.
func (w *BatchJobWrapper) With(f func(*batchv1.Job)) *BatchJobWrapper { f(&w.Job); return w }

// WithAnnotation sets one annotation on the Job.
func (w *BatchJobWrapper) WithAnnotation(k, v string) *BatchJobWrapper {
	setKey(&w.Annotations, k, v)
	return w
}

// WithContainer changes the Job's first container.
func (w *BatchJobWrapper) WithContainer(f func(*corev1.Container)) *BatchJobWrapper {
	f(&w.Spec.Template.Spec.Containers[0])
	return w
}

// ControlledBy makes the Job another controller's (a CronJob's, a JobSet's).
func (w *BatchJobWrapper) ControlledBy(apiVersion, kind, name string) *BatchJobWrapper {
	w.OwnerReferences = append(w.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name,
		UID: "00000000-0000-0000-0000-000000000001", Controller: Ptr(true)})
	return w
}

// Obj returns the Job.
func (w *BatchJobWrapper) Obj() *batchv1.Job { return &w.Job }

// JSON is the Job as an admission request carries it.
func (w *BatchJobWrapper) JSON() []byte { return MustJSON(&w.Job) }

// GVK is batch/v1 Job.
func (w *BatchJobWrapper) GVK() schema.GroupVersionKind {
	return batchv1.SchemeGroupVersion.WithKind("Job")
}
