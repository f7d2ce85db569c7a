package policy

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Policy is the effective policy for one object, after layering the config
// file, the namespace's annotations and the object's own annotations.
type Policy struct {
	CheckpointClaim    string
	CheckpointPath     string
	CheckpointKey      string // from AnnotationCheckpointKey on the object itself; "" derives one
	PreStopTimeout     time.Duration
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
}

// Enabled reports whether the injection named by one of the Injection* constants is switched on.
func (p *Policy) Enabled(injection string) bool { return !p.disabled[injection] }

// AgentBinary is the agent's path inside the training container.
func (p *Policy) AgentBinary() string { return p.AgentPath + "/" + AgentBinaryName }

// Resolve layers config < namespace annotations < object annotations. A bad
// annotation value never silently disappears: it is skipped, the lower layer
// applies, and a warning names the annotation, the value and the reason.
func Resolve(cfg *Config, nsAnnotations, objAnnotations map[string]string) (*Policy, []string) {
	if !cfg.defaulted() {
		c := *cfg
		c.applyDefaults()
		cfg = &c
	}
	p := &Policy{
		CheckpointClaim:    cfg.Checkpoint.Claim,
		CheckpointPath:     cfg.Checkpoint.Path,
		PreStopTimeout:     cfg.Checkpoint.PreStopTimeout.Duration,
		GracePeriodMargin:  cfg.Checkpoint.GracePeriodMargin.Duration,
		TaskD:              *cfg.TaskD.Enabled,
		TaskDPort:          cfg.TaskD.Port,
		RecoverStrategy:    cfg.RecoverStrategy,
		FaultScheduling:    cfg.FaultScheduling,
		GPUResource:        cfg.GPU.ResourceName,
		GPUCount:           *cfg.GPU.DefaultCount,
		AgentImage:         cfg.Agent.Image,
		AgentPullPolicy:    cfg.Agent.ImagePullPolicy,
		AgentPath:          cfg.Agent.Path,
		AgentInstall:       cfg.Agent.InstallCommand,
		TrainingContainers: cfg.TrainingContainer.Names,
		MaxReschedules:     cfg.MaxReschedules,
		disabled:           map[string]bool{},
	}
	for name, on := range cfg.Mutators {
		if !on {
			p.disabled[name] = true
		}
	}
	var warnings []string
	for _, layer := range []struct {
		what string
		ann  map[string]string
	}{{"namespace", nsAnnotations}, {"object", objAnnotations}} {
		warnings = append(warnings, p.overlay(layer.what, layer.ann)...)
	}
	return p, warnings
}

// overlay applies one layer of annotations in a fixed key order, so warnings are deterministic.
func (p *Policy) overlay(what string, ann map[string]string) []string {
	var warnings []string
	warn := func(key string, err error) {
		warnings = append(warnings, fmt.Sprintf("%s annotation %s=%q ignored: %v; the default applies", what, key, ann[key], err))
	}
	for _, key := range sortedKeys(ann) {
		v := ann[key]
		var err error
		switch key {
		case AnnotationCheckpointClaim:
			if _, err = ParseCheckpointClaim(v); err == nil {
				p.CheckpointClaim = v
			}
		case AnnotationCheckpointPath:
			if _, err = ParseCheckpointPath(v); err == nil {
				p.CheckpointPath = v
			}
		case AnnotationCheckpointKey:
			if _, err = ParseCheckpointKey(v); err == nil && what != "object" {
				err = fmt.Errorf("only a job or a pod may name its checkpoint directory (a namespace-wide key would make every job share one)")
			}
			if err == nil {
				p.CheckpointKey = v
			}
		case AnnotationPreStopTimeout:
			var d time.Duration
			if d, err = ParsePreStopTimeout(v); err == nil {
				p.PreStopTimeout = d
			}
		case AnnotationRecoverStrategy:
			if _, err = ParseRecoverStrategy(v); err == nil {
				p.RecoverStrategy = v
			}
		case AnnotationFaultScheduling:
			if _, err = ParseFaultScheduling(v); err == nil {
				p.FaultScheduling = v
			}
		case AnnotationGPULimit:
			var n int64
			if n, err = ParseGPULimit(v); err == nil {
				p.GPUCount = n
			}
		case AnnotationTaskD:
			var on bool
			if on, err = ParseTaskD(v); err == nil {
				p.TaskD = on
			}
		case AnnotationMaxReschedules:
			var n int
			if n, err = ParseMaxReschedules(v); err == nil {
				p.MaxReschedules = n
			}
		}
		if err != nil {
			warn(key, err)
		}
	}
	return warnings
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FormatDuration renders d the way a user would write it in an annotation:
// whole seconds as "90s", anything finer in Go's own notation.
func FormatDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}
