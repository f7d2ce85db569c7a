package jobs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod is v1 Pod: pods of any controller, and bare pods. It has no rules of
// its own (the generic ones apply) and no job-name labels: a pod's
// checkpoint directory is named after its controller, or itself.
func Pod() *Adapter {
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	return &Adapter{
		GVK:    gvk,
		Name:   "pod",
		Decode: Decoder(gvk, func(obj *corev1.Pod) (Job, error) { return PodJob{obj}, nil }),
		Pod:    objectOf[corev1.Pod],
	}
}

// PodJob is a decoded Pod. The injector treats it apart from jobs (the
// kind's Adapter.Pod capability says so): a pod is the end of the line,
// where per-pod decisions (node avoidance, whether it is a training pod at
// all) are made.
type PodJob struct{ *corev1.Pod }

// Object implements Job.
func (j PodJob) Object() any { return j.Pod }

// Meta implements Job.
func (j PodJob) Meta() *metav1.ObjectMeta { return &j.ObjectMeta }

// Templates implements Job: a pod is its own single template.
func (j PodJob) Templates() []Template {
	return []Template{{Meta: &j.ObjectMeta, Spec: &j.Spec}}
}

// Elastic implements Job: a pod does not scale.
func (j PodJob) Elastic() Elastic { return Elastic{} }
