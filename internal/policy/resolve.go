package policy

import (
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Resolve layers config < namespace annotations < object annotations. A bad
// annotation value never silently disappears: it is skipped, the lower layer
// applies, and a warning names the annotation, the value and the reason
// (contract.Policy.Overlay).
func Resolve(cfg *configv1alpha1.Configuration, nsAnnotations, objAnnotations map[string]string) (*contract.Policy, []string) {
	cfg = cfg.WithDefaults()
	p := &contract.Policy{
		CheckpointClaim:    cfg.Checkpoint.Claim,
		CheckpointPath:     cfg.Checkpoint.Path,
		PreStopTimeout:     cfg.Checkpoint.PreStopTimeout.Duration,
		CheckpointInterval: cfg.Checkpoint.Interval.Duration,
		GracePeriodMargin:  cfg.Checkpoint.GracePeriodMargin.Duration,
		TaskD:              *cfg.TaskD.Enabled,
		TaskDPort:          *cfg.TaskD.Port,
		RecoverStrategy:    cfg.RecoverStrategy,
		FaultScheduling:    cfg.FaultScheduling,
		GPUResource:        cfg.GPU.ResourceName,
		GPUCount:           *cfg.GPU.DefaultCount,
		AgentImage:         cfg.Agent.Image,
		AgentPullPolicy:    cfg.Agent.ImagePullPolicy,
		AgentPath:          cfg.Agent.Path,
		AgentInstall:       cfg.Agent.InstallCommand,
		TrainingContainers: cfg.TrainingContainer.Names,
		MaxReschedules:     *cfg.MaxReschedules,
	}
	p.GPUForAll = cfg.GPU.DefaultFor == configv1alpha1.GPUDefaultForAllJobs
	p.RequireDurableCheckpoints = cfg.Checkpoint.RequireDurable
	for name, on := range cfg.Mutators {
		if !on {
			p.Disable(name)
		}
	}
	warnings := p.Overlay("namespace", nsAnnotations)
	return p, append(warnings, p.Overlay("object", objAnnotations)...)
}
