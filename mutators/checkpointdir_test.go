package mutators

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				return "fieldRef:" + e.ValueFrom.FieldRef.FieldPath, true
			}
			return e.Value, true
		}
	}
	return "", false
}

// envIndex is the position of name in the container's env, -1 if absent.
func envIndex(c *corev1.Container, name string) int {
	for i, e := range c.Env {
		if e.Name == name {
			return i
		}
	}
	return -1
}

func TestJobTemplateGetsTheJobsOwnDirectory(t *testing.T) {
	tg := newTarget("pytorch").build()
	tg.Where = "spec.pytorchReplicaSpecs[Worker].template"
	tg.Kind = schema.GroupKind{Group: "kubeflow.org", Kind: "PyTorchJob"}
	tg.JobNameLabels = jobs.KubeflowPyTorchJob().JobNameLabels
	require.True(t, PreStop(tg))
	require.True(t, Checkpoint(tg))
	c := &tg.Spec.Containers[0]
	assert.Equal(t, jobSubPath, c.VolumeMounts[len(c.VolumeMounts)-1].SubPathExpr)
	key, _ := envValue(c, contract.EnvCheckpointKey)
	assert.Equal(t, "pytorchjob.kubeflow.org/$(TRAINGUARD_KUBEFLOW_JOB_NAME)/$(TRAINGUARD_OPERATOR_JOB_NAME)", key)
	kf, _ := envValue(c, contract.EnvKubeflowJobName)
	assert.Equal(t, "fieldRef:metadata.labels['training.kubeflow.org/job-name']", kf)
	op, _ := envValue(c, contract.EnvOperatorJobName)
	assert.Equal(t, "fieldRef:metadata.labels['job-name']", op)
	ns, _ := envValue(c, contract.EnvNamespace)
	assert.Equal(t, "fieldRef:metadata.namespace", ns)
	for _, name := range []string{contract.EnvCheckpointDir, contract.EnvMigrationCkptPath} {
		v, _ := envValue(c, name)
		assert.Equal(t, "/checkpoint", v, "%s is the mount of the job's directory", name)
	}
	// A value may only reference variables defined before it.
	assert.Less(t, envIndex(c, contract.EnvKubeflowJobName), envIndex(c, contract.EnvCheckpointKey))
	assert.Less(t, envIndex(c, contract.EnvPodName), envIndex(c, contract.EnvSignalDir))
}

func TestBarePodDirectoryIsNamedAfterThePodOrItsController(t *testing.T) {
	tg := newTarget("pytorch").build()
	tg.Meta.GenerateName = "train-" // no name yet at admission: the kubelet expands it
	require.True(t, Checkpoint(tg))
	key, _ := envValue(&tg.Spec.Containers[0], contract.EnvCheckpointKey)
	assert.Equal(t, "pod/$(TRAINGUARD_POD_NAME)", key)
	_, hasLabelEnv := envValue(&tg.Spec.Containers[0], contract.EnvKubeflowJobName)
	assert.False(t, hasLabelEnv, "a bare pod's directory never comes from (tenant-writable) job labels")

	yes := true
	owned := newTarget("pytorch").build()
	owned.Meta.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "nightly", Controller: &yes}}
	require.True(t, Checkpoint(owned))
	key, _ = envValue(&owned.Spec.Containers[0], contract.EnvCheckpointKey)
	assert.Equal(t, "job/nightly", key, "a controller's pods share its directory across restarts")

	hostile := newTarget("pytorch").build()
	hostile.Meta.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "../../other-ns", Controller: &yes}}
	require.True(t, Checkpoint(hostile))
	key, _ = envValue(&hostile.Spec.Containers[0], contract.EnvCheckpointKey)
	assert.Equal(t, "pod/$(TRAINGUARD_POD_NAME)", key, "an unsafe owner name never becomes a path")
	assert.Contains(t, hostile.Warnings()[0], "cannot name a directory")
}

func TestExplicitCheckpointKeyIsShared(t *testing.T) {
	for _, where := range []string{"", "spec.pytorchReplicaSpecs[Master].template"} {
		tg := newTarget("pytorch").policy(func(p *contract.Policy) { p.CheckpointKey = "shared-pretrain" }).build()
		tg.Where = where
		require.True(t, Checkpoint(tg))
		key, _ := envValue(&tg.Spec.Containers[0], contract.EnvCheckpointKey)
		assert.Equal(t, "key/shared-pretrain", key)
	}
	bad := newTarget("pytorch").policy(func(p *contract.Policy) { p.CheckpointKey = "../x" }).build()
	require.True(t, Checkpoint(bad))
	key, _ := envValue(&bad.Spec.Containers[0], contract.EnvCheckpointKey)
	assert.Equal(t, "pod/$(TRAINGUARD_POD_NAME)", key, "an invalid key is never used")
}

func TestTerminationMessagePathFollowsTheContainer(t *testing.T) {
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.Containers[0].TerminationMessagePath = "/tmp/term" }).build()
	require.True(t, Checkpoint(tg))
	v, _ := envValue(&tg.Spec.Containers[0], contract.EnvTerminationMessagePath)
	assert.Equal(t, "/tmp/term", v)
	def := newTarget("pytorch").build()
	require.True(t, Checkpoint(def))
	v, _ = envValue(&def.Spec.Containers[0], contract.EnvTerminationMessagePath)
	assert.Equal(t, "/dev/termination-log", v)
}

func TestCheckpointDirWithoutAClaimIsStillPerJob(t *testing.T) {
	tg := newTarget("pytorch").policy(func(p *contract.Policy) { p.CheckpointClaim = "" }).build()
	require.True(t, PreStop(tg))
	v, _ := envValue(&tg.Spec.Containers[0], contract.EnvCheckpointDir)
	assert.Equal(t, "/checkpoint/"+jobSubPath, v)
}

func TestCheckpointInjectionIsIdempotent(t *testing.T) {
	tg := newTarget("pytorch").build()
	tg.Where = "spec.pytorchReplicaSpecs[Worker].template"
	injectTemplate(tg)
	first := tg.Spec.DeepCopy()
	injectTemplate(tg)
	assert.Equal(t, first, tg.Spec)
}

// Each job kind's templates get their own literal prefix, the kind
// qualified by its group: a kubeflow and a KubeDL PyTorchJob of the same
// name never share a directory, and no prefix can be another key's ("pod",
// "key", "trainjob" or an owner's kind, none of which has a dot).
func TestJobTemplatePrefixIsTheKindQualifiedByItsGroup(t *testing.T) {
	keys := map[string]string{}
	for _, gk := range []schema.GroupKind{{Group: "kubeflow.org", Kind: "PyTorchJob"}, {Group: "training.kubedl.io", Kind: "PyTorchJob"}} {
		tg := newTarget("pytorch").build()
		tg.Where = "spec.pytorchReplicaSpecs[Worker].template"
		tg.Kind = gk
		tg.JobNameLabels = jobs.KubeflowPyTorchJob().JobNameLabels
		require.True(t, Checkpoint(tg))
		keys[gk.Group], _ = envValue(&tg.Spec.Containers[0], contract.EnvCheckpointKey)
	}
	assert.Equal(t, "pytorchjob.kubeflow.org/$(TRAINGUARD_KUBEFLOW_JOB_NAME)/$(TRAINGUARD_OPERATOR_JOB_NAME)", keys["kubeflow.org"])
	assert.Equal(t, "pytorchjob.training.kubedl.io/$(TRAINGUARD_KUBEFLOW_JOB_NAME)/$(TRAINGUARD_OPERATOR_JOB_NAME)", keys["training.kubedl.io"])
	for _, key := range keys {
		assert.True(t, contract.IsPathComponentSafe(strings.SplitN(key, "/", 2)[0]), key)
	}
}

// A kind whose operator names no job-name label gets the pod's name: two
// jobs of such a kind never share a directory.
func TestJobTemplateOfAKindWithoutJobNameLabelsIsNamedAfterThePod(t *testing.T) {
	tg := newTarget("pytorch").build()
	tg.Where = "spec.roles[node].template"
	tg.Kind = schema.GroupKind{Group: "trainer.example.io", Kind: "FakeTrainJob"}
	require.True(t, Checkpoint(tg))
	key, _ := envValue(&tg.Spec.Containers[0], contract.EnvCheckpointKey)
	assert.Equal(t, "faketrainjob.trainer.example.io/$(TRAINGUARD_POD_NAME)", key)
}
