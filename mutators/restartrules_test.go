package mutators

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/testing/builders"
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

// A job's template carries the in-place restarts as far as its kind tells
// its pods' restartPolicy: the rules where the pods will run with Never,
// torchrun's env always. A pod made from it then passes unchanged (no patch:
// the API server re-runs nothing). A bare pod gets them per pod.
func TestRestartRulesInAJobsTemplate(t *testing.T) {
	for _, tc := range []struct {
		podPolicy corev1.RestartPolicy // the template's PodRestartPolicy ("" unknown)
		rules     bool
	}{{corev1.RestartPolicyNever, true}, {corev1.RestartPolicyOnFailure, false}, {"", false}} {
		tg := newTarget("pytorch").template(tc.podPolicy).build()
		injectTemplate(tg)
		c := &tg.Spec.Containers[0]
		assert.Contains(t, Marked(tg.Meta.Annotations), contract.InjectionRestartRules, tc.podPolicy)
		assert.Equal(t, tc.rules, c.RestartPolicyRules != nil, tc.podPolicy)
		_, ok := envValue(c, EnvTorchrunMaxRestarts)
		assert.True(t, ok, tc.podPolicy)
		assert.Empty(t, tg.Spec.RestartPolicy, "the template's own restartPolicy is the operator's to set")

		for _, pod := range []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure} {
			p := podOf(tg, pod)
			before := p.Spec.DeepCopy()
			beforeMeta := p.Meta.DeepCopy()
			injectPerPod(p, podspec.Avoid{})
			if tc.podPolicy == pod || (tc.podPolicy == "" && pod == corev1.RestartPolicyOnFailure) {
				assert.Equal(t, before, p.Spec, "template %q, pod %s: nothing left to do per pod", tc.podPolicy, pod)
				assert.Equal(t, beforeMeta, p.Meta)
			}
			assert.Equal(t, pod == corev1.RestartPolicyNever, !contract.RestartsInPlace(p.Spec, "pytorch", 1), "exit 1 follows the pod's %s", pod)
			for _, code := range contract.ProcessFaultExitCodes() {
				assert.True(t, contract.RestartsInPlace(p.Spec, "pytorch", code), "template %q, pod %s: exit %d restarts in place", tc.podPolicy, pod, code)
			}
		}
	}
	bare := newTarget("pytorch").with(func(s *corev1.PodSpec) { s.RestartPolicy = corev1.RestartPolicyNever }).build()
	injectTemplate(bare)
	assert.Nil(t, bare.Spec.Containers[0].RestartPolicyRules, "a pod: per pod only")
	assert.NotContains(t, Marked(bare.Meta.Annotations), contract.InjectionRestartRules)
	injectPerPod(bare, podspec.Avoid{})
	assert.NotNil(t, bare.Spec.Containers[0].RestartPolicyRules)
	assert.Contains(t, Marked(bare.Meta.Annotations), contract.InjectionRestartRules)
}

// A pod whose restartPolicy is not the one its template expected (the
// job's replica restartPolicy changed since) gets the container policy
// its own: every exit but a process fault follows the pod.
func TestRestartRulesFollowThePodsPolicyOverTheTemplates(t *testing.T) {
	tg := newTarget("pytorch").template(corev1.RestartPolicyNever).build()
	injectTemplate(tg)
	p := podOf(tg, corev1.RestartPolicyOnFailure)
	injectPerPod(p, podspec.Avoid{})
	c := p.Spec.Containers[0]
	require.NotNil(t, c.RestartPolicy)
	assert.Equal(t, corev1.ContainerRestartPolicyOnFailure, *c.RestartPolicy)
	assert.True(t, contract.RestartsInPlace(p.Spec, "pytorch", 1), "OnFailure restarts exit 1 too")
}

// An operator built against a Kubernetes API before 1.34 (kubeflow's
// releases) drops the template's restartPolicyRules, which its Go types do
// not know, but keeps the container's restartPolicy: the pod gets the
// rules back, and still restarts every process fault in place.
func TestRestartRulesRestoredWhereAnOldOperatorDroppedThem(t *testing.T) {
	tg := newTarget("pytorch").template(corev1.RestartPolicyNever).build()
	injectTemplate(tg)
	p := podOf(tg, corev1.RestartPolicyNever)
	p.Spec.Containers[0].RestartPolicyRules = nil
	injectPerPod(p, podspec.Avoid{})
	assert.Equal(t, contract.InPlaceRestartRules(), p.Spec.Containers[0].RestartPolicyRules)
	assert.Empty(t, p.Warnings())

	// Without trainguard's marker the container's policy is the user's.
	own := newTarget("pytorch").with(func(s *corev1.PodSpec) {
		s.RestartPolicy = corev1.RestartPolicyNever
		s.Containers[0].RestartPolicy = builders.Ptr(corev1.ContainerRestartPolicyNever)
	}).build()
	injectPerPod(own, podspec.Avoid{})
	assert.Nil(t, own.Spec.Containers[0].RestartPolicyRules)
	require.Len(t, own.Warnings(), 1)
	assert.Contains(t, own.Warnings()[0], "own restartPolicy")
}

// podOf is a pod the operator makes from an injected template, running
// with policy, as the pod webhook sees it.
func podOf(tpl *Target, policy corev1.RestartPolicy) *Target {
	p := &Target{Meta: tpl.Meta.DeepCopy(), Spec: tpl.Spec.DeepCopy(), Policy: tpl.Policy}
	p.Spec.RestartPolicy = policy
	return p
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

// At the cap, a pod made from a template that carries the in-place
// restarts gets them taken out again, and the marker says so; what the
// user wrote differently (their own torchrun setting) stays.
func TestRestartRulesStoppedAtTheJobsCapUndoTheTemplates(t *testing.T) {
	tg := newTarget("pytorch").template(corev1.RestartPolicyNever).with(func(s *corev1.PodSpec) {
		s.Containers[0].Env = []corev1.EnvVar{{Name: EnvTorchrunMonitorInterval, Value: "2"}}
	}).build()
	injectTemplate(tg)
	p := podOf(tg, corev1.RestartPolicyNever)
	p.InPlaceStopped = true
	injectPerPod(p, podspec.Avoid{})
	c := &p.Spec.Containers[0]
	assert.Nil(t, c.RestartPolicyRules)
	assert.Nil(t, c.RestartPolicy)
	assert.False(t, contract.RestartsInPlace(p.Spec, "pytorch", 139), "the pod's Never decides")
	_, ok := envValue(c, EnvTorchrunMaxRestarts)
	assert.False(t, ok, "trainguard's torchrun restarts are removed")
	v, _ := envValue(c, EnvTorchrunMonitorInterval)
	assert.Equal(t, "2", v, "the user's own value stays")
	assert.NotContains(t, Marked(p.Meta.Annotations), contract.InjectionRestartRules)
	require.Len(t, p.Warnings(), 1)
	assert.Contains(t, p.Warnings()[0], "reached its cap")

	// A pod whose recover-strategy does not list recover-in-place (another
	// webhook set it after trainguard injected the template) is undone the
	// same way.
	q := podOf(tg, corev1.RestartPolicyNever)
	q.Meta.Annotations[contract.AnnotationMindClusterRecoverStrategy] = contract.StrategyRecover
	injectPerPod(q, podspec.Avoid{})
	assert.Nil(t, q.Spec.Containers[0].RestartPolicyRules)
	assert.NotContains(t, Marked(q.Meta.Annotations), contract.InjectionRestartRules)
	require.Len(t, q.Warnings(), 1)
	assert.Contains(t, q.Warnings()[0], "removed")
}
