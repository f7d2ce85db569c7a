package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func envNamed(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// A bare pod created with generateName in a namespace whose claim is set:
// the real API server stores (and so accepts) a mount of only the pod's own
// directory, built by the kubelet from downward-API env.
func TestCheckpointMountIsTheJobsOwnDirectory(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, map[string]string{contract.AnnotationCheckpointClaim: "ckpt"})
	pod := newPod(ns, "").Obj()
	pod.GenerateName = "train-"
	require.NoError(t, env.c.Create(ctx, pod))
	c := pod.Spec.Containers[0]
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == contract.CheckpointVolumeName {
			mount = &c.VolumeMounts[i]
		}
	}
	require.NotNil(t, mount, "checkpoint volume mounted")
	assert.Equal(t, "$(TRAINGUARD_NAMESPACE)/$(TRAINGUARD_CHECKPOINT_KEY)", mount.SubPathExpr)
	assert.Empty(t, mount.SubPath)
	key := envNamed(c, contract.EnvCheckpointKey)
	require.NotNil(t, key)
	assert.Equal(t, "pod/$(TRAINGUARD_POD_NAME)", key.Value, "a generateName pod is named by the kubelet at start")
	nsEnv := envNamed(c, contract.EnvNamespace)
	require.NotNil(t, nsEnv)
	assert.Equal(t, "metadata.namespace", nsEnv.ValueFrom.FieldRef.FieldPath)
	assert.Equal(t, "/checkpoint", envNamed(c, contract.EnvCheckpointDir).Value)
	assert.Equal(t, "/dev/termination-log", envNamed(c, contract.EnvTerminationMessagePath).Value)
}

// The env trainguard puts in a job's pod template (the operator's job-name
// labels through the downward API) is accepted by the real API server on
// the pods the operator creates from it.
func TestPodOfAJobTemplateKeepsItsJobDirectory(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, map[string]string{contract.AnnotationCheckpointClaim: "ckpt"})
	u := job(t, ns, "mnist", masterWorkerSpec)
	require.NoError(t, env.c.Create(ctx, u))
	tmpl := templateOf(t, u, "Worker")
	key := envNamed(tmpl.Spec.Containers[0], contract.EnvCheckpointKey)
	require.NotNil(t, key)
	assert.Equal(t, "pytorchjob.kubeflow.org/$(TRAINGUARD_KUBEFLOW_JOB_NAME)/$(TRAINGUARD_OPERATOR_JOB_NAME)", key.Value)

	// What the operator does: a pod from the template, with its labels.
	yes := true
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Name, pod.Namespace = "mnist-worker-0", ns
	pod.Labels = map[string]string{"training.kubeflow.org/job-name": "mnist", contract.LabelManaged: "true"}
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "mnist",
		UID: u.GetUID(), Controller: &yes}}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	require.NoError(t, env.c.Create(ctx, pod), "the API server refused the injected downward-API env")
	kf := envNamed(pod.Spec.Containers[0], contract.EnvKubeflowJobName)
	require.NotNil(t, kf)
	assert.Equal(t, "metadata.labels['training.kubeflow.org/job-name']", kf.ValueFrom.FieldRef.FieldPath)
}

// trainguard.io/checkpoint-key names a directory, so anything that is not
// one safe path component is refused at admission.
func TestCheckpointKeyThatIsNotOnePathComponentIsRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, true, map[string]string{contract.AnnotationCheckpointClaim: "ckpt"})
	for _, bad := range []string{"../team-b", "a/b", "..", "/abs"} {
		err := env.c.Create(ctx, newPod(ns, "bad-key").WithAnnotation(contract.AnnotationCheckpointKey, bad).Obj())
		require.Error(t, err, "key %q accepted", bad)
		assert.Contains(t, err.Error(), "metadata.annotations[trainguard.io/checkpoint-key]", "key %q", bad)
	}
	good := newPod(ns, "shared").WithAnnotation(contract.AnnotationCheckpointKey, "pretrain").Obj()
	require.NoError(t, env.c.Create(ctx, good))
	assert.Equal(t, "key/pretrain", envNamed(good.Spec.Containers[0], contract.EnvCheckpointKey).Value)
}
