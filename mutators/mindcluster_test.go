package mutators

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

var ttp = corev1.ContainerPort{Name: "ttp-port", ContainerPort: 8000, Protocol: corev1.ProtocolTCP}

func TestMindClusterV26Injected(t *testing.T) {
	tg := newTarget("pytorch").build()
	require.True(t, TaskD(tg))
	c := tg.Spec.Containers[0]
	assert.Contains(t, c.Ports, ttp)
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "TTP_PORT", Value: "8000"})
	assert.Equal(t, "on", tg.Meta.Labels["pod-rescheduling"])
	assert.Equal(t, "on", tg.Meta.Labels["process-recover-enable"])
	assert.Empty(t, tg.Warnings())

	before := c.DeepCopy()
	require.True(t, TaskD(tg), "idempotent")
	assert.Equal(t, *before, tg.Spec.Containers[0])
	assert.Empty(t, tg.Warnings())
}

// The user's own port 8000, TTP port name, TTP_PORT and labels are never
// overwritten: the TTP port is skipped with a warning naming the conflict;
// TaskD's port still goes in.
func TestMindClusterV26NeverClobbers(t *testing.T) {
	for name, tc := range map[string]struct {
		spec func(*corev1.PodSpec)
		warn string
	}{
		"port 8000 in use": {func(s *corev1.PodSpec) {
			s.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}
		},
			`container "pytorch" already uses port 8000 (named "http")`},
		"port 8000 in a sidecar": {func(s *corev1.PodSpec) { s.Containers[1].Ports = []corev1.ContainerPort{{ContainerPort: 8000}} },
			`container "exporter" already uses port 8000 (unnamed)`},
		"ttp-port names another port": {func(s *corev1.PodSpec) {
			s.Containers[0].Ports = []corev1.ContainerPort{{Name: "ttp-port", ContainerPort: 8100}}
		},
			`container "pytorch" uses port name ttp-port for port 8100`},
		"TTP_PORT set elsewhere": {func(s *corev1.PodSpec) { s.Containers[0].Env = []corev1.EnvVar{{Name: "TTP_PORT", Value: "8100"}} },
			`container "pytorch" sets TTP_PORT to "8100", not 8000`},
		"TTP_PORT from a reference": {func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "TTP_PORT", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		}, `sets TTP_PORT to a valueFrom reference`},
	} {
		t.Run(name, func(t *testing.T) {
			tg := newTarget("pytorch", "exporter").with(tc.spec).build()
			before := tg.Spec.DeepCopy()
			require.True(t, TaskD(tg), "TaskD's own port is independent of the TTP port")
			c := tg.Spec.Containers[0]
			assert.NotContains(t, c.Ports, ttp)
			assert.Equal(t, before.Containers[0].Env, c.Env, "env untouched")
			assert.Equal(t, before.Containers[1], tg.Spec.Containers[1], "the sidecar is untouched")
			require.Len(t, tg.Warnings(), 1)
			assert.Contains(t, tg.Warnings()[0], tc.warn)
			assert.Contains(t, tg.Warnings()[0], "MindIO TTP port 8000 not injected")
		})
	}
}

func TestMindClusterV26KeepsUserValues(t *testing.T) {
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.Containers[0].Env = []corev1.EnvVar{{Name: "TTP_PORT", Value: "8000"}}
		s.Containers[0].Ports = []corev1.ContainerPort{{Name: "ttp-port", ContainerPort: 8000}}
	}).build()
	tg.Meta.Labels = map[string]string{"pod-rescheduling": "on", "process-recover-enable": "off"}
	require.True(t, TaskD(tg))
	c := tg.Spec.Containers[0]
	assert.Equal(t, []corev1.EnvVar{{Name: "TTP_PORT", Value: "8000"}}, c.Env, "exactly what the user wrote")
	assert.Len(t, c.Ports, 2, "the user's ttp-port and TaskD's")
	assert.Equal(t, map[string]string{"pod-rescheduling": "on", "process-recover-enable": "off"}, tg.Meta.Labels)
	require.Len(t, tg.Warnings(), 1)
	assert.Contains(t, tg.Warnings()[0], `label process-recover-enable="off" kept`)
}

// The same switch as TaskD: the policy's TaskD off (trainguard.io/taskd:
// disabled, taskd.enabled: false) adds none of it.
func TestMindClusterV26FollowsTaskDSwitch(t *testing.T) {
	off := newTarget("pytorch").policy(func(p *contract.Policy) { p.TaskD = false }).build()
	assert.False(t, TaskD(off))
	assert.Empty(t, off.Spec.Containers[0].Ports)
	assert.Empty(t, off.Spec.Containers[0].Env)
	assert.Empty(t, off.Meta.Labels)
}
