package mutators

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Under restartPolicy Never (kubeflow's ExitCode, a Job's pods) the training
// container gets restart rules for the process-fault codes, so the kubelet
// restarts it in place; the rescheduler reads the same rules.
func TestRestartRulesUnderNever(t *testing.T) {
	tg := newTarget("pytorch", "sidecar").with(func(s *corev1.PodSpec) { s.RestartPolicy = corev1.RestartPolicyNever }).build()
	require.True(t, RestartRules(tg))
	c := &tg.Spec.Containers[0]
	require.NotNil(t, c.RestartPolicy)
	assert.Equal(t, corev1.ContainerRestartPolicyNever, *c.RestartPolicy, "the pod's own policy for every other exit")
	assert.Equal(t, contract.InPlaceRestartRules(), c.RestartPolicyRules)
	for _, code := range []int32{137, 138, 139} {
		assert.True(t, contract.RestartsInPlace(tg.Spec, "pytorch", code), "exit %d restarts in place", code)
	}
	for _, code := range []int32{0, 1, 2, 127, 143} {
		assert.False(t, contract.RestartsInPlace(tg.Spec, "pytorch", code), "exit %d follows the pod's Never", code)
	}
	assert.Nil(t, tg.Spec.Containers[1].RestartPolicyRules, "only the training container")
	v, _ := envValue(c, EnvTorchrunMaxRestarts)
	assert.Equal(t, "10", v, "torchrun restarts its workers up to the job's cap")
	v, _ = envValue(c, EnvTorchrunMonitorInterval)
	assert.Equal(t, "1", v)

	before := tg.Spec.DeepCopy()
	assert.True(t, RestartRules(tg), "idempotent")
	assert.Equal(t, before, tg.Spec)
	assert.Empty(t, tg.Warnings())
}

// OnFailure and Always restart every process fault already: no rules, only
// torchrun's env.
func TestRestartRulesNotNeededUnderOnFailure(t *testing.T) {
	for _, p := range []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyAlways} {
		tg := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.RestartPolicy = p }).build()
		assert.True(t, RestartRules(tg))
		assert.Nil(t, tg.Spec.Containers[0].RestartPolicy, p)
		assert.Nil(t, tg.Spec.Containers[0].RestartPolicyRules, p)
		_, ok := envValue(&tg.Spec.Containers[0], EnvTorchrunMaxRestarts)
		assert.True(t, ok, p)
	}
}

// The user's own restart rules, container restartPolicy and torchrun
// settings are kept, with a warning where the rules are skipped.
func TestRestartRulesKeepTheUsersValues(t *testing.T) {
	onFailure := corev1.ContainerRestartPolicyOnFailure
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.RestartPolicy = corev1.RestartPolicyNever
		s.Containers[0].RestartPolicy = &onFailure
		s.Containers[0].Env = []corev1.EnvVar{{Name: EnvTorchrunMaxRestarts, Value: "3"}}
	}).build()
	assert.True(t, RestartRules(tg))
	assert.Equal(t, &onFailure, tg.Spec.Containers[0].RestartPolicy)
	assert.Nil(t, tg.Spec.Containers[0].RestartPolicyRules)
	v, _ := envValue(&tg.Spec.Containers[0], EnvTorchrunMaxRestarts)
	assert.Equal(t, "3", v)
	if assert.Len(t, tg.Warnings(), 1) {
		assert.Contains(t, tg.Warnings()[0], "own restartPolicy")
	}
}

// recover-strategy without recover-in-place (recover alone, exit) gets
// nothing: the user asked for rescheduling, or for no retry.
func TestRestartRulesFollowTheRecoverStrategy(t *testing.T) {
	for _, s := range []string{"recover", "exit", "dump"} {
		tg := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.RestartPolicy = corev1.RestartPolicyNever }).build()
		tg.Meta.Annotations = map[string]string{contract.AnnotationMindClusterRecoverStrategy: s}
		assert.False(t, RestartRules(tg), s)
		assert.Nil(t, tg.Spec.Containers[0].RestartPolicyRules, s)
		assert.Empty(t, tg.Spec.Containers[0].Env, s)
	}
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.RestartPolicy = corev1.RestartPolicyNever }).
		policy(func(p *contract.Policy) { p.RecoverStrategy = "recover" }).build()
	tg.Meta.Annotations = map[string]string{contract.AnnotationRecoverStrategy: "recover-in-place"}
	assert.True(t, RestartRules(tg), "the object's trainguard.io/recover-strategy over the policy")
	assert.NotNil(t, tg.Spec.Containers[0].RestartPolicyRules)
}

// A job's template is never given the rules: its pods' restartPolicy is the
// operator's to set (kubeflow turns ExitCode into Never on the pod).
func TestRestartRulesArePerPod(t *testing.T) {
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.RestartPolicy = corev1.RestartPolicyNever }).build()
	injectTemplate(tg)
	assert.Nil(t, tg.Spec.Containers[0].RestartPolicyRules)
	assert.NotContains(t, Marked(tg.Meta.Annotations), contract.InjectionRestartRules)
	setManaged(tg)
	injectPerPod(tg, nil)
	assert.NotNil(t, tg.Spec.Containers[0].RestartPolicyRules)
	assert.Contains(t, Marked(tg.Meta.Annotations), contract.InjectionRestartRules)
}

// Once the rescheduler stopped the job's in-place restarts at its cap (its
// record), a new pod gets no restart rules and no torchrun restarts, and no
// tenant annotation brings them back.
func TestRestartRulesStoppedAtTheJobsCap(t *testing.T) {
	tg := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.RestartPolicy = corev1.RestartPolicyNever }).build()
	tg.Meta.Annotations = map[string]string{contract.AnnotationMindClusterRecoverStrategy: contract.StrategyRecoverInPlace}
	tg.InPlaceStopped = true
	assert.False(t, RestartRules(tg))
	c := &tg.Spec.Containers[0]
	assert.Nil(t, c.RestartPolicyRules)
	assert.Nil(t, c.RestartPolicy)
	_, ok := envValue(c, EnvTorchrunMaxRestarts)
	assert.False(t, ok)
	require.Len(t, tg.Warnings(), 1)
	assert.Contains(t, tg.Warnings()[0], "reached its cap")
}
