package integration

import (
	"context"
	"fmt"
	"github.com/trainguard/trainguard/internal/testing/builders"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

var nsCounter atomic.Int64 // unique namespace names across tests.

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

// newPod is a bare training pod that is not restarted.
func newPod(ns, name string) *builders.PodWrapper {
	return builders.MakePod(ns, name).WithRestartPolicy(corev1.RestartPolicyNever)
}

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
