package contract

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Policy is the effective policy for one object, after layering the config
// file, the namespace's annotations and the object's own annotations
// (policy.Resolve builds the first layer, Overlay adds the others).
type Policy struct {
	CheckpointClaim string
	CheckpointPath  string
	CheckpointKey   string // from AnnotationCheckpointKey on the object itself; "" derives one
	// JobDirectory is the job's checkpoint directory below the namespace's
	// (e.g. trainjob/<name>), set by the webhook from a job identity it
	// verified (a TrainJob read from the API server), never from
	// annotations or labels. Empty lets the mutator derive it.
	JobDirectory   string
	PreStopTimeout time.Duration
	// CheckpointInterval is the SDK's periodic checkpoint interval,
	// injected as EnvCheckpointEvery; 0 injects nothing (off).
	CheckpointInterval time.Duration
	GracePeriodMargin  time.Duration
	TaskD              bool
	TaskDPort          int32
	RecoverStrategy    string
	FaultScheduling    string
	GPUResource        corev1.ResourceName
	GPUCount           int64
	AgentImage         string
	AgentPullPolicy    corev1.PullPolicy
	AgentPath          string
	AgentInstall       []string
	TrainingContainers []string
	MaxReschedules     int
	disabled           map[string]bool

	// GPUForAll gives CPU jobs the GPU default too (config gpu.defaultFor:
	// AllJobs, or an explicit trainguard.io/gpu-limit); otherwise only jobs
	// that show they want an accelerator get it (mutators/gpu.go).
	GPUForAll bool
	// RequireDurableCheckpoints refuses training pods whose checkpoints
	// would die with them, instead of warning.
	RequireDurableCheckpoints bool
	// InProcessRecovery wraps the training container's command in the
	// SDK's supervisor (mutators/inprocess.go).
	InProcessRecovery bool
}

// Enabled reports whether the injection named by one of the Injection* constants is switched on.
func (p *Policy) Enabled(injection string) bool { return !p.disabled[injection] }

// Disable switches one injection off (the config file's `mutators` map).
func (p *Policy) Disable(injection string) {
	if p.disabled == nil {
		p.disabled = map[string]bool{}
	}
	p.disabled[injection] = true
}

// AgentBinary is the agent's path inside the training container.
func (p *Policy) AgentBinary() string { return p.AgentPath + "/" + AgentBinaryName }

// FormatDuration renders d the way a user would write it in an annotation:
// whole seconds as "90s", anything finer in Go's own notation.
func FormatDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}
