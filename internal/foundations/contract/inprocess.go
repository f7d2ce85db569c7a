package contract

import (
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// InProcessWay is how the SDK's supervisor goes into a training container
// (trainguard.io/in-process-recovery: enabled).
type InProcessWay int

const (
	// InProcessNot means it does not (the why says so).
	InProcessNot InProcessWay = iota
	// InProcessCommand means the container's command runs under it (python3 -m
	// trainguard supervise -- <command>).
	InProcessCommand
	// InProcessTorchrun means torchrun launches the trainers and starts each
	// worker under it: torchrun runs its workers with $PYTHON_EXEC, which
	// is set to EnvPythonExecValue. The container's command is untouched.
	InProcessTorchrun
)

const (
	// EnvPythonExec is torchrun's own setting for the interpreter it starts
	// each worker with (`$PYTHON_EXEC -u SCRIPT ...`), sys.executable
	// unless set.
	EnvPythonExec = "PYTHON_EXEC"
	// EnvPythonExecValue is the SDK's command (on PATH where the SDK is
	// installed) that runs python3 with its arguments under the supervisor.
	EnvPythonExecValue = "trainguard-python"
)

// InProcessApplies says how the SDK's supervisor goes into c, the training
// container of a job of kind (torchrun: its operator launches the trainers
// with torchrun):
//   - under torchrun (an elastic PyTorchJob, a command that runs torchrun,
//     a container with torchrun's PET_* settings such as a TrainJob's
//     trainer pod) as each of torchrun's workers (PYTHON_EXEC), unless
//     the container sets PYTHON_EXEC itself;
//   - otherwise around a PyTorchJob's command, whose operator sets RANK,
//     WORLD_SIZE and MASTER_PORT for each pod.
//
// The why is for the warning when it does not.
func InProcessApplies(kind string, torchrun bool, c *corev1.Container) (InProcessWay, string) {
	switch {
	case torchrun || launchesTorchrun(c) || hasTorchrunEnv(c):
		if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvPythonExec }) && !WorkersSupervised(c) {
			return InProcessNot, "the container sets " + EnvPythonExec + " (the interpreter torchrun starts its workers with), which trainguard would replace with " +
				EnvPythonExecValue + ": remove it, or the annotation"
		}
		return InProcessTorchrun, ""
	case kind != "PyTorchJob":
		return InProcessNot, "only a PyTorchJob's command or torchrun's workers run under the supervisor (its operator sets no RANK, WORLD_SIZE and MASTER_PORT for a plain command)"
	}
	return InProcessCommand, ""
}

// WorkersSupervised says c's env has torchrun start its workers under the
// supervisor: PYTHON_EXEC is EnvPythonExecValue (its first entry).
func WorkersSupervised(c *corev1.Container) bool {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvPythonExec })
	return i >= 0 && c.Env[i].Value == EnvPythonExecValue && c.Env[i].ValueFrom == nil
}

// launchesTorchrun says c's command (or, without one, its args) starts
// torchrun or torch.distributed.run / launch.
func launchesTorchrun(c *corev1.Container) bool {
	words := slices.Concat(c.Command, c.Args)
	for i, w := range words {
		if i > 2 {
			break
		}
		if base := path.Base(w); base == "torchrun" || w == "torch.distributed.run" || w == "torch.distributed.launch" {
			return true
		}
	}
	return false
}

// hasTorchrunEnv says c sets torchrun's own settings (PET_NNODES,
// PET_NPROC_PER_NODE, which only torchrun reads): Kubeflow Trainer's torch
// runtime sets them on its trainer pods, whose command may be a shell.
func hasTorchrunEnv(c *corev1.Container) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "PET_NNODES" || e.Name == "PET_NPROC_PER_NODE"
	})
}
