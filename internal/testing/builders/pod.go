package builders

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// PodWrapper builds a v1 Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod is a pod with one container named pytorch.
func MakePod(ns, name string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{Container("pytorch")}},
	}}
}

// With applies f to the pod.
func (w *PodWrapper) With(f func(*corev1.Pod)) *PodWrapper { f(&w.Pod); return w }

// WithAnnotation sets one annotation.
func (w *PodWrapper) WithAnnotation(k, v string) *PodWrapper { setKey(&w.Annotations, k, v); return w }

// WithLabel sets one label.
func (w *PodWrapper) WithLabel(k, v string) *PodWrapper { setKey(&w.Labels, k, v); return w }

// WithContainers replaces the containers.
func (w *PodWrapper) WithContainers(cs ...corev1.Container) *PodWrapper {
	w.Spec.Containers = cs
	return w
}

// WithPorts sets the first container's ports.
func (w *PodWrapper) WithPorts(ports ...corev1.ContainerPort) *PodWrapper {
	w.Spec.Containers[0].Ports = ports
	return w
}

// WithRestartPolicy sets the pod's restart policy.
func (w *PodWrapper) WithRestartPolicy(p corev1.RestartPolicy) *PodWrapper {
	w.Spec.RestartPolicy = p
	return w
}

// Injected marks the pod as the mutating webhook leaves it.
func (w *PodWrapper) Injected() *PodWrapper {
	return w.WithAnnotation(contract.AnnotationInjected, "prestop,taskd")
}

// Realistic pads the pod to about 8 KB, the size of a typical training
// pod with its env, mounts and probes (the benchmarks' pod).
func (w *PodWrapper) Realistic() *PodWrapper {
	realisticPod(&w.ObjectMeta, &w.Spec)
	return w
}

// realisticPod pads a pod's (or a template's) first container, volumes,
// labels and placement to what a typical training pod carries.
func realisticPod(meta *metav1.ObjectMeta, spec *corev1.PodSpec) {
	realisticContainer(&spec.Containers[0])
	c := &spec.Containers[0]
	for i := range 6 {
		name := fmt.Sprintf("data-%d", i)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/data/" + name})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "dataset-" + name}}})
	}
	meta.Labels = map[string]string{"app": "trainer", "team": "vision", kubeflowv1.LabelJobName: "resnet"}
	spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	spec.NodeSelector = map[string]string{"accelerator": "a100"}
}

// Obj returns the pod.
func (w *PodWrapper) Obj() *corev1.Pod { return &w.Pod }

// JSON returns the pod as the API server would send it.
func (w *PodWrapper) JSON() []byte { return MustJSON(&w.Pod) }

// GVK is v1 Pod.
func (w *PodWrapper) GVK() schema.GroupVersionKind { return corev1.SchemeGroupVersion.WithKind("Pod") }
