package webhook

import (
	"context"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

const sameNameKubeflow = `apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: train, namespace: team-a}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: example/train}]
`

const sameNameKubeDL = `apiVersion: training.kubedl.io/v1alpha1
kind: PyTorchJob
metadata: {name: train, namespace: team-a}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: example/train}]
`

// A kubeflow and a KubeDL PyTorchJob of the same name in one namespace must
// not share a checkpoint directory or an identity: each would load, prune
// and acknowledge the other's checkpoints. The directory is what the
// kubelet builds from subPathExpr with the labels each operator puts on its
// pods; the identity is what the SDK derives from the key.
func TestKubeflowAndKubeDLJobsOfTheSameNameGetDifferentDirectories(t *testing.T) {
	kubeflow := injectedWorker(t, sameNameKubeflow)
	kubedl := injectedWorker(t, sameNameKubeDL)
	kubedlPod := map[string]string{"job-name": "train"}
	for what, labels := range map[string]map[string]string{
		"kubeflow >= 1.7":  {"training.kubeflow.org/job-name": "train"},
		"kubeflow 1.5-1.6": {"training.kubeflow.org/job-name": "train", "job-name": "train"},
	} {
		kfDir, kfID := kubeletDirAndIdentity(t, kubeflow, "team-a", labels)
		dlDir, dlID := kubeletDirAndIdentity(t, kubedl, "team-a", kubedlPod)
		assert.NotEqual(t, kfDir, dlDir, "%s: both jobs use directory %s", what, kfDir)
		assert.NotEqual(t, kfID, dlID, "%s: both jobs have identity %s", what, kfID)
		assert.True(t, strings.HasPrefix(kfDir, "team-a/pytorchjob.kubeflow.org/train"), "%s: %s", what, kfDir)
	}
	dlDir, _ := kubeletDirAndIdentity(t, kubedl, "team-a", kubedlPod)
	assert.Equal(t, "team-a/pytorchjob.training.kubedl.io/train", dlDir)
	// The literal prefixes can never be another key's: "pod", "key",
	// "trainjob" and owner kinds (DNS-1035 labels) have no dot.
	for _, c := range []*corev1.Container{kubeflow, kubedl} {
		key := envOf(c, contract.EnvCheckpointKey)
		prefix := strings.SplitN(key, "/", 2)[0]
		assert.Contains(t, prefix, ".", key)
		assert.NotContains(t, []string{"pod", "key", "trainjob"}, prefix)
	}
}

// injectedWorker runs the offline injector (the webhook's code) on one job
// and returns its Worker template's training container.
func injectedWorker(t *testing.T, doc string) *corev1.Container {
	t.Helper()
	out, _, err := NewOffline(goldenConfig(t)).InjectDocument(context.Background(), []byte(doc))
	require.NoError(t, err)
	var job struct {
		Spec struct {
			PyTorchReplicaSpecs map[string]struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"pytorchReplicaSpecs"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(out, &job))
	containers := job.Spec.PyTorchReplicaSpecs["Worker"].Template.Spec.Containers
	require.NotEmpty(t, containers)
	require.NotEmpty(t, envOf(&containers[0], contract.EnvCheckpointKey), "no checkpoint key injected:\n%s", out)
	return &containers[0]
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// kubeletDirAndIdentity expands the key as the kubelet does for a pod with
// these labels (downward API, then $(VAR) references), and returns the
// job's directory below the claim (cleaned, as the kubelet's subPath is)
// and the SDK's identity (sdk/python/trainguard/_protocol.py job_identity).
func kubeletDirAndIdentity(t *testing.T, c *corev1.Container, namespace string, labels map[string]string) (string, string) {
	t.Helper()
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			fp := e.ValueFrom.FieldRef.FieldPath
			if fp == "metadata.namespace" {
				vars[e.Name] = namespace
			} else if l, ok := strings.CutPrefix(fp, "metadata.labels['"); ok {
				vars[e.Name] = labels[strings.TrimSuffix(l, "']")]
			}
		default:
			vars[e.Name] = envRef.ReplaceAllStringFunc(e.Value, func(ref string) string { return vars[ref[2:len(ref)-1]] })
		}
	}
	key := vars[contract.EnvCheckpointKey]
	var parts []string
	for _, p := range strings.Split(key, "/") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return path.Clean(namespace + "/" + key), namespace + "/" + strings.Join(parts, "/")
}

func envOf(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
