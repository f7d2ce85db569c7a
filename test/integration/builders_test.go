package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/contract"
)

var nsCounter atomic.Int64 //nolint:gochecknoglobals // unique namespace names across tests.

// namespace creates a fresh namespace; opted-in when optIn is true.
func namespace(t *testing.T, optIn bool, extra map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("it-%d", nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if optIn {
		ns.Annotations[contract.AnnotationInject] = contract.InjectEnabled
	}
	for k, v := range extra {
		ns.Annotations[k] = v
	}
	require.NoError(t, env.c.Create(context.Background(), ns))
	return name
}

// podBuilder builds test pods.
type podBuilder struct{ pod *corev1.Pod }

func newPod(ns, name string) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}},
		},
	}}
}

func (b *podBuilder) annotate(k, v string) *podBuilder {
	if b.pod.Annotations == nil {
		b.pod.Annotations = map[string]string{}
	}
	b.pod.Annotations[k] = v
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.pod }

// job builds a kubeflow.org/v1 PyTorchJob as unstructured, from YAML.
func job(t *testing.T, ns, name, specYAML string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	doc := fmt.Sprintf("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n%s", name, ns, specYAML)
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
	return u
}

const masterWorkerSpec = `  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: example.com/mnist:1
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: example.com/mnist:1
`

const elasticSpec = `  elasticPolicy:
    rdzvBackend: c10d
    minReplicas: 1
    maxReplicas: 3
    maxRestarts: 10
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: example.com/elastic:1
`

const invalidElasticSpec = `  elasticPolicy:
    rdzvBackend: etcd
    minReplicas: 4
    maxReplicas: 2
  pytorchReplicaSpecs:
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - name: pytorch
            image: example.com/elastic:1
`
