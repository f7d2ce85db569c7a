package contract

import (
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// InProcessApplies says whether the SDK's supervisor may wrap c, the
// training container of a job of kind (torchrun: its operator launches the
// trainers with torchrun): a PyTorchJob's template (whose operator sets RANK,
// WORLD_SIZE and MASTER_PORT for each pod), not one torchrun launches
// (an elastic PyTorchJob, a command that runs torchrun: torchrun's agent
// restarts its workers itself, and a second store at MASTER_PORT would
// collide with its rendezvous). The why is for the warning.
func InProcessApplies(kind string, torchrun bool, c *corev1.Container) (bool, string) {
	switch {
	case kind != "PyTorchJob":
		return false, "only a PyTorchJob's trainer runs under the supervisor (under torchrun, e.g. a TrainJob, torchrun's agent restarts the workers)"
	case torchrun || launchesTorchrun(c):
		return false, "torchrun launches this trainer: its agent restarts the workers, and the supervisor would take its rendezvous port"
	}
	return true, ""
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
