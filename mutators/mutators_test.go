package mutators

import (
	"github.com/trainguard/trainguard/internal/testing/builders"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
)

const agent = "/opt/trainguard/bin/trainguard-agent"

func TestTrainingContainerSelection(t *testing.T) {
	assert.Equal(t, "pytorch", newTarget("sidecar", "pytorch").build().TrainingContainer().Name)
	assert.Equal(t, "ascend", newTarget("sidecar", "ascend").build().TrainingContainer().Name)
	assert.Equal(t, "pytorch", newTarget("ascend", "pytorch").build().TrainingContainer().Name, "list order wins over container order")
	assert.Equal(t, "first", newTarget("first", "second").build().TrainingContainer().Name)
	assert.Nil(t, newTarget().build().TrainingContainer())
}

func TestPreStopChainsUserHooks(t *testing.T) {
	cases := map[string]struct {
		hook *corev1.LifecycleHandler
		want []string
	}{
		"none": {nil, []string{agent, "prestop", "--timeout=60s"}},
		"exec": {&corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "x"}}},
			[]string{agent, "prestop", "--timeout=60s", "--", "/bin/sh", "-c", "x"}},
		"httpGet numeric": {&corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "stop", Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTP}},
			[]string{agent, "prestop", "--timeout=60s", "--then-http-get=http://127.0.0.1:8080/stop"}},
		"httpGet host and headers": {&corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "10.0.0.1", Path: "/q", Port: intstr.FromString("9000"),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "A", Value: "b"}}}},
			[]string{agent, "prestop", "--timeout=60s", "--then-http-get=http://10.0.0.1:9000/q", "--then-http-header=A: b"}},
		"sleep": {&corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 7}},
			[]string{agent, "prestop", "--timeout=60s", "--then-sleep=7s"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := newTarget("pytorch")
			if tc.hook != nil {
				b.preStop(tc.hook)
			}
			tg := b.build()
			require.True(t, PreStop(tg))
			assert.Equal(t, tc.want, tg.Spec.Containers[0].Lifecycle.PreStop.Exec.Command)
			assert.Nil(t, tg.Spec.Containers[0].Lifecycle.PreStop.HTTPGet, "only one handler may remain")
			assert.Nil(t, tg.Spec.Containers[0].Lifecycle.PreStop.Sleep)
			assert.Empty(t, tg.Warnings())
			before := tg.Spec.DeepCopy()
			require.True(t, PreStop(tg))
			assert.Equal(t, before, tg.Spec, "a second run changes nothing")
		})
	}
}

func TestPreStopNamedHTTPPort(t *testing.T) {
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.Containers[0].Ports = []corev1.ContainerPort{{Name: "admin", ContainerPort: 8081}}
	}).preStop(&corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("admin")}}).build()
	require.True(t, PreStop(tg))
	assert.Contains(t, tg.Spec.Containers[0].Lifecycle.PreStop.Exec.Command, "--then-http-get=http://127.0.0.1:8081/")
}

func TestPreStopKeepsHooksItCannotChain(t *testing.T) {
	for name, hook := range map[string]*corev1.LifecycleHandler{
		"unknown named port": {HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("nope")}},
		"tcpSocket":          {TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}},
		"https":              {HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8443), Scheme: corev1.URISchemeHTTPS}},
	} {
		t.Run(name, func(t *testing.T) {
			tg := newTarget("pytorch").preStop(hook).build()
			assert.False(t, PreStop(tg))
			assert.Equal(t, hook, tg.Spec.Containers[0].Lifecycle.PreStop, "the user's hook is kept")
			assert.Empty(t, tg.Spec.InitContainers)
			require.Len(t, tg.Warnings(), 1)
			assert.Contains(t, tg.Warnings()[0], "your hook is kept")
		})
	}
}

func TestPreStopGracePeriodIsRaisedNeverLowered(t *testing.T) {
	cases := map[string]struct {
		grace   *int64
		timeout int
		want    int64
	}{
		"unset uses kubelet default then raises": {nil, 1, 90},
		"short is raised":                        {builders.Ptr(int64(10)), 1, 90},
		"long is kept":                           {builders.Ptr(int64(600)), 1, 600},
		"longer timeout":                         {builders.Ptr(int64(60)), 5, 330},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := newTarget("pytorch").policy(func(p *contract.Policy) { p.PreStopTimeout = minutes(tc.timeout) })
			if tc.grace != nil {
				b.grace(*tc.grace)
			}
			tg := b.build()
			require.True(t, PreStop(tg))
			assert.Equal(t, tc.want, *tg.Spec.TerminationGracePeriodSeconds)
		})
	}
}

func TestPreStopVolumeClash(t *testing.T) {
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.Volumes = []corev1.Volume{{Name: contract.AgentVolumeName, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}}}
	}).build()
	assert.False(t, PreStop(tg))
	assert.Contains(t, tg.Warnings()[0], "not an emptyDir")
}

func TestTaskDPort(t *testing.T) {
	tg := newTarget("pytorch").build()
	require.True(t, TaskD(tg))
	taskd := corev1.ContainerPort{Name: "taskd-port", ContainerPort: 9601, Protocol: corev1.ProtocolTCP}
	assert.Equal(t, taskd, tg.Spec.Containers[0].Ports[0])
	require.True(t, TaskD(tg), "idempotent")
	assert.Len(t, tg.Spec.Containers[0].Ports, 2, "TaskD's and MindIO TTP's (mindcluster_test.go)")

	for name, port := range map[string]corev1.ContainerPort{
		"port used": {Name: "metrics", ContainerPort: 9601},
		"name used": {Name: "taskd-port", ContainerPort: 7000},
	} {
		t.Run(name, func(t *testing.T) {
			tg := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.Containers[0].Ports = []corev1.ContainerPort{port} }).build()
			assert.False(t, TaskD(tg))
			assert.Equal(t, port, tg.Spec.Containers[0].Ports[0], "the user's port is kept")
			assert.NotContains(t, tg.Spec.Containers[0].Ports, taskd)
			require.Len(t, tg.Warnings(), 1)
		})
	}
	off := newTarget("pytorch").policy(func(p *contract.Policy) { p.TaskD = false }).build()
	assert.False(t, TaskD(off))
	assert.Empty(t, off.Spec.Containers[0].Ports)
}

func TestCheckpointVolume(t *testing.T) {
	tg := newTarget("pytorch").build()
	require.True(t, Checkpoint(tg))
	assert.Equal(t, "ckpt", tg.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	assert.Equal(t, corev1.VolumeMount{Name: contract.CheckpointVolumeName, MountPath: "/checkpoint", SubPathExpr: jobSubPath}, tg.Spec.Containers[0].VolumeMounts[0])
	assert.Contains(t, tg.Spec.Containers[0].Env, corev1.EnvVar{Name: "MIGRATION_CKPT_PATH", Value: "/checkpoint"})

	reuse := newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "ckpt"}}}}
		s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mine", MountPath: "/data/ckpt"}}
	}).build()
	require.True(t, Checkpoint(reuse))
	assert.Len(t, reuse.Spec.Volumes, 1, "the same claim is not mounted twice")
	assert.Contains(t, reuse.Spec.Containers[0].Env, corev1.EnvVar{Name: contract.EnvCheckpointDir, Value: "/data/ckpt/" + jobSubPath}, "its path is reused, with the job's directory below it")

	clash := newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/checkpoint"}}
		s.Volumes = []corev1.Volume{{Name: "scratch"}}
	}).build()
	assert.False(t, Checkpoint(clash))
	assert.Contains(t, clash.Warnings()[0], "already mounts volume \"scratch\"")

	none := newTarget("pytorch").policy(func(p *contract.Policy) { p.CheckpointClaim = "" }).build()
	assert.False(t, Checkpoint(none))
	assert.Empty(t, none.Spec.Volumes)
}

func TestGPUDefaults(t *testing.T) {
	tg := newTarget("pytorch").policy(func(p *contract.Policy) { p.GPUForAll = true }).build()
	require.True(t, GPU(tg))
	assertGPU(t, "1", tg.Spec.Containers[0].Resources.Limits)
	assertGPU(t, "1", tg.Spec.Containers[0].Resources.Requests)

	own := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.Containers[0].Resources.Limits = gpu("8") }).build()
	assert.False(t, GPU(own))
	assertGPU(t, "8", own.Spec.Containers[0].Resources.Limits)
	assert.Nil(t, own.Spec.Containers[0].Resources.Requests)

	reqOnly := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.Containers[0].Resources.Requests = gpu("2") }).build()
	require.True(t, GPU(reqOnly))
	assertGPU(t, "2", reqOnly.Spec.Containers[0].Resources.Limits)

	zero := newTarget("pytorch").policy(func(p *contract.Policy) { p.GPUCount, p.GPUForAll = 0, true }).build()
	assert.False(t, GPU(zero))
}

func TestRecoverStrategyKeepsUserValues(t *testing.T) {
	tg := newTarget("pytorch").build()
	tg.Meta.Annotations = map[string]string{"recover-strategy": "retry,dump"}
	require.True(t, RecoverStrategy(tg))
	assert.Equal(t, "retry,dump", tg.Meta.Annotations["recover-strategy"])
	assert.Equal(t, "grace", tg.Meta.Labels["fault-scheduling"])
}

func TestAvoidNodesNarrowsEveryTerm(t *testing.T) {
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
			}}}}
	}).build()
	require.True(t, AvoidNodes(tg, podspec.Avoid{Required: []string{"node-b", "node-a"}}))
	terms := tg.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	require.Len(t, terms, 2, "no term is added: that would widen the user's selection")
	for _, term := range terms {
		require.Len(t, term.MatchExpressions, 2)
		assert.Equal(t, corev1.NodeSelectorRequirement{Key: podspec.HostnameKey, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node-a", "node-b"}}, term.MatchExpressions[1])
	}
	require.True(t, AvoidNodes(tg, podspec.Avoid{Required: []string{"node-c", "node-a"}}))
	assert.Equal(t, []string{"node-a", "node-b", "node-c"}, terms[0].MatchExpressions[1].Values, "merged into the existing expression")
	before := tg.Spec.DeepCopy()
	AvoidNodes(tg, podspec.Avoid{Required: []string{"node-a"}})
	assert.Equal(t, before, tg.Spec, "idempotent")
	assert.False(t, AvoidNodes(newTarget("pytorch").build(), podspec.Avoid{}))
}

// A node that failed the job once is only preferred against: one term of
// the greatest weight, merged on a re-run, never a required expression, so
// the pod still fits the node when nothing else does. A node both
// preferred and required is written once, as required.
func TestAvoidNodesPrefersAgainstNodesThatFailedOnce(t *testing.T) {
	tg := newTarget("pytorch").build()
	require.True(t, AvoidNodes(tg, podspec.Avoid{Preferred: []string{"node-b", "node-a"}}))
	na := tg.Spec.Affinity.NodeAffinity
	assert.Nil(t, na.RequiredDuringSchedulingIgnoredDuringExecution, "nothing is forbidden")
	require.Len(t, na.PreferredDuringSchedulingIgnoredDuringExecution, 1)
	term := na.PreferredDuringSchedulingIgnoredDuringExecution[0]
	assert.Equal(t, int32(100), term.Weight)
	assert.Equal(t, []corev1.NodeSelectorRequirement{{Key: podspec.HostnameKey, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node-a", "node-b"}}},
		term.Preference.MatchExpressions)

	before := tg.Spec.DeepCopy()
	assert.False(t, AvoidNodes(tg, podspec.Avoid{Preferred: []string{"node-a"}}), "nothing new")
	assert.Equal(t, before, tg.Spec, "idempotent")
	require.True(t, AvoidNodes(tg, podspec.Avoid{Required: []string{"node-c"}, Preferred: []string{"node-c", "node-d"}}))
	assert.Equal(t, []string{"node-a", "node-b", "node-d"}, na.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchExpressions[0].Values,
		"merged into the term; node-c is required instead")
	assert.Equal(t, []string{"node-c"}, na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values)

	// A user's own preference of another shape is left as it was.
	user := corev1.PreferredSchedulingTerm{Weight: 5, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100"}}}}}
	tg = newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{user}}}
	}).build()
	require.True(t, AvoidNodes(tg, podspec.Avoid{Preferred: []string{"node-a"}}))
	prefs := tg.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	require.Len(t, prefs, 2)
	assert.Equal(t, user, prefs[0])
}

func TestInjectTemplateMarkerAndSwitches(t *testing.T) {
	tg := newTarget("pytorch").build()
	tg.Policy = defaultPolicy()
	tg.Policy.Disable(contract.InjectionGPU)
	applied := injectTemplate(tg)
	assert.Equal(t, []string{"prestop", "taskd", "recover-strategy"}, applied)
	assert.Equal(t, "prestop,taskd,recover-strategy", tg.Meta.Annotations[contract.AnnotationInjected])
	assert.Nil(t, tg.Spec.Containers[0].Resources.Limits, "a switched-off injection does nothing")
	assert.Equal(t, "true", tg.Meta.Labels[contract.LabelManaged])
}

func ptr[T any](v T) *T { return &v }

func assertGPU(t *testing.T, want string, list corev1.ResourceList) {
	t.Helper()
	q, ok := list["nvidia.com/gpu"]
	require.True(t, ok, "nvidia.com/gpu is set")
	assert.Equal(t, want, q.String())
}
