package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainguard/trainguard/internal/contract"
	"github.com/trainguard/trainguard/internal/policy"
)

// namespaces is a static NamespaceAnnotations for tests.
func namespaces(m map[string]map[string]string) NamespaceAnnotations {
	return func(_ context.Context, name string) (map[string]string, bool, error) {
		ann, ok := m[name]
		return ann, ok, nil
	}
}

func optedIn() map[string]map[string]string {
	return map[string]map[string]string{
		"team-a":   {contract.AnnotationInject: contract.InjectEnabled},
		"other":    {},
		"team-ckp": {contract.AnnotationInject: contract.InjectEnabled, contract.AnnotationCheckpointClaim: "ckpt"},
	}
}

func testServer(t testing.TB, log logr.Logger) *Server {
	t.Helper()
	return NewServer(Options{Config: policy.DefaultConfig(), OwnNamespace: "trainguard-system"}, namespaces(optedIn()), nil, log)
}

// podBuilder builds pods for handler tests, kueue-style.
type podBuilder struct{ pod corev1.Pod }

func pod(ns, name string) *podBuilder {
	return &podBuilder{pod: corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}}},
	}}
}

func (b *podBuilder) annotate(k, v string) *podBuilder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[k] = v
	return b
}

// realistic pads the pod to about 8 KB, the size of a typical training pod
// with its env, mounts and probes.
func (b *podBuilder) realistic() *podBuilder {
	c := &b.pod.Spec.Containers[0]
	c.Command = []string{"torchrun", "--nnodes=2", "--nproc_per_node=8", "/workspace/train.py"}
	c.Args = []string{"--config", "/etc/train/config.yaml", "--epochs", "90", "--batch-size", "256"}
	for i := 0; i < 90; i++ {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("TRAIN_SETTING_%02d", i), Value: fmt.Sprintf("value-number-%02d-for-the-trainer", i)})
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}})
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("128Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Gi")},
	}
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("data-%d", i)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/data/" + name})
		b.pod.Spec.Volumes = append(b.pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "dataset-" + name}}})
	}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intOrStr(8080)}}, PeriodSeconds: 10}
	b.pod.Labels = map[string]string{"app": "trainer", "team": "vision", "training.kubeflow.org/job-name": "resnet"}
	b.pod.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	b.pod.Spec.NodeSelector = map[string]string{"accelerator": "a100"}
	return b
}

func (b *podBuilder) raw(t testing.TB) []byte {
	t.Helper()
	raw, err := json.Marshal(&b.pod)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// review wraps an object into an AdmissionReview body as the API server sends it.
func review(t testing.TB, op admissionv1.Operation, gvk metav1.GroupVersionKind, ns string, raw []byte, dryRun bool) []byte {
	t.Helper()
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("7b1f4c1e-0000-4000-8000-00000000abcd"), Kind: gvk, Operation: op,
			Namespace: ns, Object: runtime.RawExtension{Raw: raw}, DryRun: &dryRun,
		},
	}
	body, err := json.Marshal(&ar)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func podGVK() metav1.GroupVersionKind { return metav1.GroupVersionKind{Version: "v1", Kind: "Pod"} }
