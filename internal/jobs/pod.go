package jobs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Pod adapts v1 Pod: pods of any controller, and bare pods.
type Pod struct{}

// GVK implements Adapter.
func (Pod) GVK() schema.GroupVersionKind { return corev1.SchemeGroupVersion.WithKind("Pod") }

// Name implements Adapter.
func (Pod) Name() string { return "pod" }

// Decode implements Adapter.
func (a Pod) Decode(raw []byte) (Job, error) {
	obj, err := decodeAs[corev1.Pod](a.GVK(), raw)
	if err != nil {
		return nil, err
	}
	return PodJob{obj}, nil
}

// PodJob is a decoded Pod. The injector treats it apart from jobs: a pod
// is the end of the line, where per-pod decisions (node avoidance,
// whether it is a training pod at all) are made.
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
