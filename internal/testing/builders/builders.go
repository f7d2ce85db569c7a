// Package builders makes the pods and jobs the test suites feed trainguard,
// in the style of kueue's pkg/util/testingjobs: each Make* returns a valid
// object, and each method changes one thing and returns the wrapper, so a
// test reads as the difference it is about. Tests only; production code
// never imports it.
package builders

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Image is the image of every container the builders make.
const Image = "example.com/train:1"

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }

// Container is a container with a name and the builders' image.
func Container(name string) corev1.Container { return corev1.Container{Name: name, Image: Image} }

// Template is a pod template with these containers.
func Template(containers ...corev1.Container) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers}}
}

// GPULimit is a resource requirement of n nvidia.com/gpu.
func GPULimit(n int64) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(n, resource.DecimalSI)}}
}

// MustJSON marshals a typed fixture; that cannot fail for these types, so
// a failure is a broken test and panics.
func MustJSON(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("builders: marshalling %T: %v", v, err))
	}
	return raw
}

// toUnstructured decodes a builder's own JSON, which always decodes, into
// the form a client sends without the kind's Go types. The fields the Go
// types marshal empty (creationTimestamp: null) the API server drops.
func toUnstructured(raw []byte) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(raw, &u.Object); err != nil {
		panic(fmt.Sprintf("builders: decoding own JSON: %v", err))
	}
	return u
}

func setKey(m *map[string]string, k, v string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
}

// realisticContainer pads a container to what a typical training pod
// carries: a torchrun command, 90 env vars, resources, a probe.
func realisticContainer(c *corev1.Container) {
	c.Command = []string{"torchrun", "--nnodes=2", "--nproc_per_node=8", "/workspace/train.py"}
	c.Args = []string{"--config", "/etc/train/config.yaml", "--epochs", "90", "--batch-size", "256"}
	for i := range 90 {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("TRAIN_SETTING_%02d", i), Value: fmt.Sprintf("value-number-%02d-for-the-trainer", i)})
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}})
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("128Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Gi")},
	}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10}
}
