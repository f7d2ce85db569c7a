package mutators

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func envOf(c *corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

func inProcessTarget() *targetBuilder {
	return newTarget("pytorch").template(corev1.RestartPolicyOnFailure).grace(90).
		policy(func(p *contract.Policy) { p.InProcessRecovery, p.MaxReschedules = true, 4 }).
		with(func(s *corev1.PodSpec) {
			s.Containers[0].Command, s.Containers[0].Args = []string{"python3", "train.py"}, []string{"--steps", "9"}
		})
}

// The supervisor goes in front of the command once (a second admission
// changes nothing), the args stay, and its budget is the job's cap.
func TestInProcessWrapsTheCommandOnce(t *testing.T) {
	tg := inProcessTarget().build()
	assert.True(t, InProcess(tg))
	assert.True(t, InProcess(tg), "again")
	c := &tg.Spec.Containers[0]
	assert.Equal(t, []string{"python3", "-m", "trainguard", "supervise", "--", "python3", "train.py"}, c.Command)
	assert.Equal(t, []string{"--steps", "9"}, c.Args)
	assert.Equal(t, map[string]string{EnvReformTimeout: "30s", EnvInProcessRestarts: "4"}, envOf(c))
	assert.Empty(t, tg.Warnings())
}

func TestInProcessBudgetAndTimeout(t *testing.T) {
	// A short grace period: the survivors give up well within it.
	tg := inProcessTarget().grace(20).build()
	InProcess(tg)
	assert.Equal(t, "10s", envOf(&tg.Spec.Containers[0])[EnvReformTimeout])
	// The user may tighten the budget, never widen it past the cap.
	for have, want := range map[string]string{"2": "2", "40": "4", "-1": "4", "many": "4"} {
		tg := inProcessTarget().with(func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: EnvInProcessRestarts, Value: have}}
		}).build()
		InProcess(tg)
		assert.Equal(t, want, envOf(&tg.Spec.Containers[0])[EnvInProcessRestarts], "user's %q", have)
	}
	// A second entry of the name, which the kubelet would take, cannot lift
	// the bound a first one within it seemed to keep: one entry stays.
	for _, have := range [][2]string{{"0", "1000"}, {"1000", "2"}, {"3", "-1"}} {
		tg := inProcessTarget().with(func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: EnvInProcessRestarts, Value: have[0]}, {Name: "X", Value: "1"},
				{Name: EnvInProcessRestarts, Value: have[1]}}
		}).build()
		InProcess(tg)
		var values []string
		for _, e := range tg.Spec.Containers[0].Env {
			if e.Name == EnvInProcessRestarts {
				values = append(values, e.Value)
			}
		}
		want := map[string]string{"1000": "4", "2": "2", "-1": "4"}[have[1]]
		assert.Equal(t, []string{want}, values, "user's %q", have)
		assert.Equal(t, EnvInProcessRestarts, tg.Spec.Containers[0].Env[0].Name, "where the first entry was")
	}
	// A pod of a job whose in-place restarts stopped at the cap: none.
	tg = inProcessTarget().build()
	InProcess(tg)
	Mark(tg.Meta, []string{contract.InjectionInProcess})
	pod := &Target{Meta: tg.Meta, Spec: tg.Spec, Policy: tg.Policy, InPlaceStopped: true}
	assert.True(t, InProcessPod(pod))
	assert.Equal(t, "0", envOf(&pod.Spec.Containers[0])[EnvInProcessRestarts])
}

func TestInProcessOnlyWhereItApplies(t *testing.T) {
	cases := map[string]*Target{
		"a bare pod": func() *Target { tg := inProcessTarget().build(); tg.Kind.Kind = ""; return tg }(),
		"torchrun with the user's PYTHON_EXEC": inProcessTarget().with(func(s *corev1.PodSpec) {
			s.Containers[0].Command = []string{"torchrun", "--nproc-per-node=2", "train.py"}
			s.Containers[0].Env = []corev1.EnvVar{{Name: contract.EnvPythonExec, Value: "/opt/venv/bin/python"}}
		}).build(),
	}
	for name, tg := range cases {
		before := append([]string(nil), tg.Spec.Containers[0].Command...)
		env := append([]corev1.EnvVar(nil), tg.Spec.Containers[0].Env...)
		assert.False(t, InProcess(tg), name)
		assert.Equal(t, before, tg.Spec.Containers[0].Command, name)
		assert.Equal(t, env, tg.Spec.Containers[0].Env, name)
		assert.Len(t, tg.Warnings(), 1, name)
	}
	// No command: the validating webhook refuses it; nothing here.
	tg := inProcessTarget().with(func(s *corev1.PodSpec) { s.Containers[0].Command = nil }).build()
	assert.False(t, InProcess(tg))
	assert.Empty(t, tg.Spec.Containers[0].Env)
	// Off (the default): nothing.
	tg = inProcessTarget().policy(func(p *contract.Policy) { p.InProcessRecovery = false }).build()
	assert.False(t, InProcess(tg))
	assert.Equal(t, []string{"python3", "train.py"}, tg.Spec.Containers[0].Command)
}

// TestInProcessUnderTorchrun: where torchrun launches the trainers (an
// elastic PyTorchJob, a command that runs torchrun, a TrainJob's trainer
// pod whose command is a shell but whose env is torchrun's), the command is
// left as it is and torchrun starts each worker under the supervisor
// (PYTHON_EXEC); the budget and the re-form bound are set as for a
// command; each pod's budget still follows the record.
func TestInProcessUnderTorchrun(t *testing.T) {
	cases := map[string]*Target{
		"elastic": func() *Target { tg := inProcessTarget().build(); tg.Torchrun = true; return tg }(),
		"torchrun command": inProcessTarget().with(func(s *corev1.PodSpec) {
			s.Containers[0].Command = []string{"torchrun", "--nproc-per-node=2", "train.py"}
		}).build(),
		"trainer pod": func() *Target {
			tg := inProcessTarget().with(func(s *corev1.PodSpec) {
				s.Containers[0].Command = []string{"sh", "-c", "python3 -m torch.distributed.run train.py"}
				s.Containers[0].Env = []corev1.EnvVar{{Name: "PET_NPROC_PER_NODE", Value: "2"}}
			}).build()
			tg.Kind.Kind = ""
			return tg
		}(),
		"the user's PYTHON_EXEC is already ours": inProcessTarget().with(func(s *corev1.PodSpec) {
			s.Containers[0].Command = []string{"torchrun", "train.py"}
			s.Containers[0].Env = []corev1.EnvVar{{Name: contract.EnvPythonExec, Value: contract.EnvPythonExecValue}}
		}).build(),
	}
	for name, tg := range cases {
		before := append([]string(nil), tg.Spec.Containers[0].Command...)
		assert.True(t, InProcess(tg), name)
		assert.Equal(t, before, tg.Spec.Containers[0].Command, name)
		env := envOf(&tg.Spec.Containers[0])
		assert.Equal(t, contract.EnvPythonExecValue, env[contract.EnvPythonExec], name)
		assert.Equal(t, "4", env[EnvInProcessRestarts], name)
		assert.Equal(t, "30s", env[EnvReformTimeout], name)
		assert.Empty(t, tg.Warnings(), name)
		assert.True(t, InProcess(tg), name+": again")
		assert.Equal(t, env, envOf(&tg.Spec.Containers[0]), name+": idempotent")
		Mark(tg.Meta, []string{contract.InjectionInProcess})
		pod := &Target{Meta: tg.Meta, Spec: tg.Spec, Policy: tg.Policy, InPlaceStopped: true}
		assert.True(t, InProcessPod(pod), name)
		assert.Equal(t, "0", envOf(&pod.Spec.Containers[0])[EnvInProcessRestarts], name)
	}
}
