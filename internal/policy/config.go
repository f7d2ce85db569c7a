package policy

import (
	"fmt"
	"os"
	"path"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/version"
)

// Config is the cluster-wide policy file read by `trainguard serve --config`
// and `trainguard inject --config`. Every field has a default, so an empty
// file (or none) is valid.
type Config struct {
	// ClusterWide injects every namespace except ExcludedNamespaces, without
	// waiting for the namespace's opt-in annotation.
	ClusterWide bool `json:"clusterWide,omitempty"`
	// ExcludedNamespaces are never mutated. kube-system and trainguard's own
	// namespace are always added, whatever this says.
	ExcludedNamespaces []string `json:"excludedNamespaces,omitempty"`

	Checkpoint        CheckpointConfig        `json:"checkpoint"`
	TaskD             TaskDConfig             `json:"taskd"`
	RecoverStrategy   string                  `json:"recoverStrategy,omitempty"`
	FaultScheduling   string                  `json:"faultScheduling,omitempty"`
	GPU               GPUConfig               `json:"gpu"`
	Agent             AgentConfig             `json:"agent"`
	TrainingContainer TrainingContainerConfig `json:"trainingContainer"`
	// Mutators switches individual injections off by name (prestop, taskd,
	// checkpoint-volume, recover-strategy, gpu, avoid-nodes). Absent means on.
	Mutators map[string]bool `json:"mutators,omitempty"`
	// MaxReschedules caps the rescheduler per job; trainguard.io/max-reschedules overrides it.
	MaxReschedules int `json:"maxReschedules,omitempty"`
}

// CheckpointConfig describes the checkpoint volume and the preStop hook.
type CheckpointConfig struct {
	// Claim is the PVC mounted for checkpoints; empty means no volume is added.
	Claim string `json:"claim,omitempty"`
	// Path is where the claim is mounted in the training container.
	Path string `json:"path,omitempty"`
	// PreStopTimeout bounds how long the agent waits for the trainer's checkpoint.
	PreStopTimeout *metav1.Duration `json:"preStopTimeout,omitempty"`
	// GracePeriodMargin is added to PreStopTimeout to form the minimum
	// terminationGracePeriodSeconds, leaving the trainer time to exit after the hook.
	GracePeriodMargin *metav1.Duration `json:"gracePeriodMargin,omitempty"`
}

// TaskDConfig controls MindCluster's TaskD port.
type TaskDConfig struct {
	Enabled *bool `json:"enabled,omitempty"`
	Port    int32 `json:"port,omitempty"`
}

// GPUConfig controls the default accelerator limit.
type GPUConfig struct {
	ResourceName corev1.ResourceName `json:"resourceName,omitempty"`
	// DefaultCount is set as limit (and request) on training containers that
	// have no such resource. 0 turns the default off.
	DefaultCount *int64 `json:"defaultCount,omitempty"`
}

// AgentConfig says where the trainguard-agent comes from and where it lands in the pod.
type AgentConfig struct {
	Image           string            `json:"image,omitempty"`
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Path is the directory of the shared emptyDir the agent is copied into.
	Path string `json:"path,omitempty"`
	// InstallCommand is what the init container runs; the target directory is appended.
	InstallCommand []string `json:"installCommand,omitempty"`
}

// TrainingContainerConfig says how the training container is picked: the
// first container whose name is in Names, in the order of Names, else the
// pod's first container.
type TrainingContainerConfig struct {
	Names []string `json:"names,omitempty"`
}

// Defaults of the config file, documented in the README's config reference.
const (
	DefaultCheckpointPath    = "/checkpoint"
	DefaultPreStopTimeout    = 60 * time.Second
	DefaultGracePeriodMargin = 30 * time.Second
	DefaultTaskDPort         = 9601
	DefaultRecoverStrategy   = "recover"
	DefaultFaultScheduling   = "grace"
	DefaultGPUResource       = "nvidia.com/gpu"
	DefaultGPUCount          = 1
	DefaultAgentImage        = version.Image // pinned to this release, never latest
	DefaultAgentPath         = "/opt/trainguard/bin"
	DefaultMaxReschedules    = 10
)

// DefaultConfig returns the configuration used when no file is given.
func DefaultConfig() *Config {
	c := &Config{}
	c.applyDefaults()
	return c
}

// LoadConfig reads a policy file strictly: an unknown key is an error, so a
// typo never silently falls back to a default.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		return DefaultConfig(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	return ParseConfig(data)
}

// ParseConfig decodes and checks a policy file's content.
func ParseConfig(data []byte) (*Config, error) {
	c := &Config{}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("parsing config file: %w", err)
	}
	c.applyDefaults()
	if errs := c.validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid config file: %w", errs.ToAggregate())
	}
	return c, nil
}

func (c *Config) applyDefaults() {
	if c.Checkpoint.Path == "" {
		c.Checkpoint.Path = DefaultCheckpointPath
	}
	if c.Checkpoint.PreStopTimeout == nil {
		c.Checkpoint.PreStopTimeout = &metav1.Duration{Duration: DefaultPreStopTimeout}
	}
	if c.Checkpoint.GracePeriodMargin == nil {
		c.Checkpoint.GracePeriodMargin = &metav1.Duration{Duration: DefaultGracePeriodMargin}
	}
	if c.TaskD.Enabled == nil {
		on := true
		c.TaskD.Enabled = &on
	}
	if c.TaskD.Port == 0 {
		c.TaskD.Port = DefaultTaskDPort
	}
	if c.RecoverStrategy == "" {
		c.RecoverStrategy = DefaultRecoverStrategy
	}
	if c.FaultScheduling == "" {
		c.FaultScheduling = DefaultFaultScheduling
	}
	if c.GPU.ResourceName == "" {
		c.GPU.ResourceName = DefaultGPUResource
	}
	if c.GPU.DefaultCount == nil {
		n := int64(DefaultGPUCount)
		c.GPU.DefaultCount = &n
	}
	if c.Agent.Image == "" {
		c.Agent.Image = DefaultAgentImage
	}
	if c.Agent.ImagePullPolicy == "" {
		c.Agent.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.Agent.Path == "" {
		c.Agent.Path = DefaultAgentPath
	}
	if len(c.Agent.InstallCommand) == 0 {
		c.Agent.InstallCommand = []string{"/" + AgentBinaryName, "install"}
	}
	if len(c.TrainingContainer.Names) == 0 {
		c.TrainingContainer.Names = []string{"pytorch", "ascend"}
	}
	if c.MaxReschedules == 0 {
		c.MaxReschedules = DefaultMaxReschedules
	}
	if !contains(c.ExcludedNamespaces, "kube-system") {
		c.ExcludedNamespaces = append(c.ExcludedNamespaces, "kube-system")
	}
}

// defaulted reports whether applyDefaults ran (Resolve needs its pointers set).
func (c *Config) defaulted() bool {
	return c.Checkpoint.PreStopTimeout != nil && c.Checkpoint.GracePeriodMargin != nil && c.TaskD.Enabled != nil && c.GPU.DefaultCount != nil
}

// Excluded reports whether a namespace is never mutated.
func (c *Config) Excluded(namespace string) bool {
	return contains(c.ExcludedNamespaces, namespace)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// validate applies the annotation rules to the file's values too, so the
// config file can never set what an annotation could not.
func (c *Config) validate() field.ErrorList {
	var errs field.ErrorList
	check := func(p *field.Path, v string, err error) {
		if err != nil {
			errs = append(errs, field.Invalid(p, v, err.Error()))
		}
	}
	if c.Checkpoint.Claim != "" {
		_, err := ParseCheckpointClaim(c.Checkpoint.Claim)
		check(field.NewPath("checkpoint", "claim"), c.Checkpoint.Claim, err)
	}
	_, err := ParseCheckpointPath(c.Checkpoint.Path)
	check(field.NewPath("checkpoint", "path"), c.Checkpoint.Path, err)
	_, err = ParsePreStopTimeout(c.Checkpoint.PreStopTimeout.Duration.String())
	check(field.NewPath("checkpoint", "preStopTimeout"), c.Checkpoint.PreStopTimeout.Duration.String(), err)
	if c.Checkpoint.GracePeriodMargin.Duration < 0 {
		check(field.NewPath("checkpoint", "gracePeriodMargin"), c.Checkpoint.GracePeriodMargin.Duration.String(), fmt.Errorf("must not be negative"))
	}
	if c.TaskD.Port < 1 || c.TaskD.Port > 65535 {
		check(field.NewPath("taskd", "port"), fmt.Sprint(c.TaskD.Port), fmt.Errorf("must be between 1 and 65535"))
	}
	_, err = ParseRecoverStrategy(c.RecoverStrategy)
	check(field.NewPath("recoverStrategy"), c.RecoverStrategy, err)
	_, err = ParseFaultScheduling(c.FaultScheduling)
	check(field.NewPath("faultScheduling"), c.FaultScheduling, err)
	_, err = ParseGPULimit(fmt.Sprint(*c.GPU.DefaultCount))
	check(field.NewPath("gpu", "defaultCount"), fmt.Sprint(*c.GPU.DefaultCount), err)
	if !path.IsAbs(c.Agent.Path) || path.Clean(c.Agent.Path) != c.Agent.Path {
		check(field.NewPath("agent", "path"), c.Agent.Path, fmt.Errorf("must be an absolute, clean path"))
	}
	for name := range c.Mutators {
		if !contains(Injections(), name) {
			check(field.NewPath("mutators").Key(name), name, fmt.Errorf("unknown injection; use one of %v", Injections()))
		}
	}
	if c.MaxReschedules < 0 {
		check(field.NewPath("maxReschedules"), fmt.Sprint(c.MaxReschedules), fmt.Errorf("must not be negative"))
	}
	return errs
}
