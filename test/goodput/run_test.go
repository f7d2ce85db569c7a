package goodput

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func TestEachArmRunsTheSameJobAsItsUserWritesIt(t *testing.T) {
	r := New(Config{Image: "img", Claim: "ckpt", StepDelay: 0.3, SaveEvery: 20, Arms: Arms("gp")}, nil, nil)
	for _, a := range r.cfg.Arms {
		j := r.job(a)
		assert.Equal(t, map[string]string{"kueue.x-k8s.io/queue-name": "goodput", "kueue.x-k8s.io/priority-class": "goodput-low"}, j.GetLabels())
		assert.Equal(t, a.Name == "trainguard", j.GetAnnotations()[contract.AnnotationInProcessRecovery] == "enabled",
			"%s: only trainguard's arm recovers a rank in process", a.Name)
		for _, rt := range []string{"Master", "Worker"} {
			spec, _, _ := unstructured.NestedMap(j.Object, "spec", "pytorchReplicaSpecs", rt)
			assert.Equal(t, "OnFailure", spec["restartPolicy"])
			vols, _, _ := unstructured.NestedSlice(spec, "template", "spec", "volumes")
			ann, _, _ := unstructured.NestedStringMap(spec, "template", "metadata", "annotations")
			assert.Equal(t, a.Trainguard, len(vols) == 0, "%s: only trainguard mounts the claim itself", a.Name)
			assert.Equal(t, a.KueueRecovery, ann["kueue.x-k8s.io/safe-to-forcefully-delete"] == "true", a.Name)
			cs, _, _ := unstructured.NestedSlice(spec, "template", "spec", "containers")
			cmd := cs[0].(map[string]any)["command"].([]any)
			assert.Contains(t, cmd[2], "--step-delay 0.3 --save-every 20 --raise-if-exists /tmp/goodput-raise")
			// the supervisor's child must be the trainer itself (a shell
			// would turn its signal death into an exit code)
			assert.Equal(t, a.Name == "trainguard", strings.HasPrefix(cmd[2].(string), "exec python3 /opt/trainguard/trainer/train.py "), "%s: %s", a.Name, cmd[2])
			assert.Equal(t, !a.Trainguard, strings.Contains(cmd[2].(string), " --plain --ckpt-dir /checkpoint"),
				"%s: every arm but trainguard's runs the users' own trainer, without the SDK, saving to the claim it mounts", a.Name)
			// placed by rank alike in every arm: with the same rank of
			// every arm, away from the other rank of every arm
			same, other := strings.ToLower(rt), map[string]string{"Master": "worker", "Worker": "master"}[rt]
			aff, _, _ := unstructured.NestedSlice(spec, "template", "spec", "affinity", "podAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
			anti, _, _ := unstructured.NestedSlice(spec, "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
			require.Len(t, aff, 1)
			require.Len(t, anti, 2)
			for _, c := range []struct {
				term any
				typ  string
				arms bool
			}{{aff[0], same, true}, {anti[0], "", false}, {anti[1], other, true}} {
				term := c.term.(map[string]any)["podAffinityTerm"].(map[string]any)
				assert.Equal(t, "kubernetes.io/hostname", term["topologyKey"])
				typ, _, _ := unstructured.NestedString(term, "labelSelector", "matchLabels", "training.kubeflow.org/replica-type")
				assert.Equal(t, c.typ, typ, "%s %s", a.Name, rt)
				nss, _, _ := unstructured.NestedSlice(term, "namespaceSelector", "matchExpressions")
				if c.arms {
					require.Len(t, nss, 1)
					assert.Equal(t, []any{"gp-trainguard", "gp-plain", "gp-kueue"}, nss[0].(map[string]any)["values"])
				} else {
					assert.Empty(t, nss, "own job only")
				}
			}
		}
	}
	out, err := yaml.Marshal(r.job(r.cfg.Arms[0]).Object)
	require.NoError(t, err)
	t.Logf("%s", out)
}

func node(name string, cpu string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
}

func armPod(ns, name, nodeName, cpu string, prio int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"training.kubeflow.org/job-name": jobName}},
		Spec: corev1.PodSpec{NodeName: nodeName, Priority: &prio, Containers: []corev1.Container{{
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestTargetNodeIsWhereTheMostArmsRun(t *testing.T) {
	arms := Arms("gp")
	cs := fake.NewClientset(
		armPod("gp-trainguard", "a", "n2", "50m", 0), armPod("gp-trainguard", "b", "n3", "50m", 0),
		armPod("gp-plain", "a", "n2", "50m", 0), armPod("gp-plain", "b", "n3", "50m", 0),
		armPod("gp-kueue", "a", "n3", "50m", 0), armPod("gp-kueue", "b", "n3", "50m", 0),
	)
	r := New(Config{Arms: arms}, cs, nil)
	got, hosted, err := r.targetNode(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, "n3", got, "every arm has a pod on n3, two on n2")
	assert.Equal(t, []string{"trainguard", "plain", "kueue-recovery"}, hosted)

	even := fake.NewClientset(armPod("gp-trainguard", "a", "n2", "50m", 0), armPod("gp-trainguard", "b", "n3", "50m", 0))
	r = New(Config{Arms: arms}, even, nil)
	for slot, want := range []string{"n2", "n3"} {
		got, _, err := r.targetNode(context.Background(), slot)
		require.NoError(t, err)
		assert.Equal(t, want, got, "a tie goes to the schedule's slot")
	}
}

func TestUrgentPodNeedsEveryLowerPriorityPodsCPU(t *testing.T) {
	cs := fake.NewClientset(node("n2", "2"),
		armPod("gp-trainguard", "a", "n2", "50m", 0), armPod("gp-plain", "a", "n2", "100m", 0),
		armPod("kube-system", "critical", "n2", "300m", 2000001000))
	r := New(Config{Arms: Arms("gp"), Interval: time.Minute}, cs, nil)
	cpu, err := r.urgentCPU(context.Background(), "n2")
	require.NoError(t, err)
	// all but the critical pod's 300m: it fits only when both training pods go
	assert.Equal(t, int64(1700), cpu)
}

func TestHealsRunWhenDue(t *testing.T) {
	var ran []string
	h := func(name string, due time.Time) heal {
		return heal{due: due, f: func() { ran = append(ran, name) }}
	}
	now := time.Now()
	left := healDue([]heal{h("uncordon", time.Time{}), h("restore", now.Add(time.Minute))}, now)
	assert.Equal(t, []string{"uncordon"}, ran, "a drain ends at the next disruption, a dead node stays dead")
	require.Len(t, left, 1)
	left = healDue(left, now.Add(time.Minute))
	assert.Equal(t, []string{"uncordon", "restore"}, ran)
	assert.Empty(t, left)
	healDue([]heal{h("last", now.Add(time.Hour))}, time.Time{})
	assert.Equal(t, "last", ran[2], "the end of the run heals everything")
}
