package builders

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

// TrainJobWrapper builds a trainer.kubeflow.org/v1alpha1 TrainJob.
type TrainJobWrapper struct{ trainerv1alpha1.TrainJob }

// MakeTrainJob is a TrainJob on Trainer's torch-distributed runtime,
// overriding nothing.
func MakeTrainJob(ns, name string) *TrainJobWrapper {
	return &TrainJobWrapper{trainerv1alpha1.TrainJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainerv1alpha1.GroupVersion.String(), Kind: trainerv1alpha1.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       trainerv1alpha1.TrainJobSpec{RuntimeRef: trainerv1alpha1.RuntimeRef{Name: "torch-distributed"}},
	}}
}

// With applies f to the TrainJob.
func (w *TrainJobWrapper) With(f func(*trainerv1alpha1.TrainJob)) *TrainJobWrapper {
	f(&w.TrainJob)
	return w
}

// WithAnnotation sets one annotation on the TrainJob.
func (w *TrainJobWrapper) WithAnnotation(k, v string) *TrainJobWrapper {
	setKey(&w.Annotations, k, v)
	return w
}

// Obj returns the TrainJob.
func (w *TrainJobWrapper) Obj() *trainerv1alpha1.TrainJob { return &w.TrainJob }

// JSON returns the TrainJob as the API server would send it.
func (w *TrainJobWrapper) JSON() []byte { return MustJSON(&w.TrainJob) }

// GVK is trainer.kubeflow.org/v1alpha1 TrainJob.
func (w *TrainJobWrapper) GVK() schema.GroupVersionKind {
	return trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind)
}

// Unstructured is the TrainJob as the suites create it without Trainer's Go types.
func (w *TrainJobWrapper) Unstructured() *unstructured.Unstructured { return toUnstructured(w.JSON()) }

// JobSet is a jobset.x-k8s.io/v1alpha2 JobSet, declared as far as the
// trainer API's copy of its spec goes (trainguard reads no more of it).
type JobSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              trainerv1alpha1.JobSetSpec `json:"spec,omitempty"`
}

// JobSetWrapper builds a JobSet.
type JobSetWrapper struct{ JobSet }

// MakeJobSet is the JobSet Trainer makes of a TrainJob: the TrainJob's
// name, one replicated job "node" of one Job, whose pods run container
// "node" and are not restarted in place.
func MakeJobSet(ns, name string) *JobSetWrapper {
	tpl := Template(Container(trainerv1alpha1.Node))
	tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &JobSetWrapper{JobSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainerv1alpha1.JobSetAPIVersion, Kind: trainerv1alpha1.JobSetKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: trainerv1alpha1.JobSetSpec{ReplicatedJobs: []trainerv1alpha1.ReplicatedJob{{
			Name:     trainerv1alpha1.Node,
			Replicas: Ptr[int32](1),
			Template: trainerv1alpha1.JobTemplateSpec{Spec: trainerv1alpha1.JobSpec{Template: tpl}},
		}}},
	}}
}

// With applies f to the JobSet.
func (w *JobSetWrapper) With(f func(*JobSet)) *JobSetWrapper { f(&w.JobSet); return w }

// WithOwner adds an owner reference (a TrainJob's, or a forged one).
func (w *JobSetWrapper) WithOwner(ref metav1.OwnerReference) *JobSetWrapper {
	w.OwnerReferences = append(w.OwnerReferences, ref)
	return w
}

// Obj returns the JobSet.
func (w *JobSetWrapper) Obj() *JobSet { return &w.JobSet }

// JSON returns the JobSet as the API server would send it.
func (w *JobSetWrapper) JSON() []byte { return MustJSON(&w.JobSet) }

// GVK is jobset.x-k8s.io/v1alpha2 JobSet.
func (w *JobSetWrapper) GVK() schema.GroupVersionKind { return w.GroupVersionKind() }

// Unstructured is the JobSet as the suites create it without JobSet's Go types.
func (w *JobSetWrapper) Unstructured() *unstructured.Unstructured { return toUnstructured(w.JSON()) }
