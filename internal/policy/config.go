package policy

import (
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/contract"
	"github.com/trainguard/trainguard/internal/version"
)

// Versioned file format, like kueue's and jobset's Configuration.
const (
	ConfigAPIVersion = "config.trainguard.io/v1alpha1"
	ConfigKind       = "Configuration"
)

// Config is the configuration file read by `trainguard serve --config`,
// `trainguard inject --config` and `trainguard validate --config`:
// apiVersion config.trainguard.io/v1alpha1, kind Configuration. Every
// field has a default, so an empty file (or none) is valid. The
// unversioned format of earlier releases (the same fields without
// apiVersion and kind) still loads, with a deprecation warning.
type Config struct {
	metav1.TypeMeta `json:",inline"`

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
	// Rescheduler configures the rescheduling controller; `trainguard serve`
	// flags of the same name override it.
	Rescheduler ReschedulerConfig `json:"rescheduler"`
}

// ReschedulerConfig holds the rescheduler's settings (docs/rescheduler.md).
type ReschedulerConfig struct {
	// Enabled runs the controller (--rescheduler).
	Enabled *bool `json:"enabled,omitempty"`
	// NodeLostGrace: how long a node may be NotReady before its pods count as lost (--node-lost-grace).
	NodeLostGrace *metav1.Duration `json:"nodeLostGrace,omitempty"`
	// GraceOverTime: how long a graceful delete may hang before a force delete (--grace-over-time).
	GraceOverTime *metav1.Duration `json:"graceOverTime,omitempty"`
	// BadNodeTTL: how long a node stays recorded as bad for a job (--bad-node-ttl).
	BadNodeTTL *metav1.Duration `json:"badNodeTTL,omitempty"`
	// MaxBadNodes bounds the record per job (--max-bad-nodes).
	MaxBadNodes int `json:"maxBadNodes,omitempty"`
	// UnknownExitCodeRetryable treats exit codes outside kubeflow's table as retryable (--unknown-exit-code-retryable).
	UnknownExitCodeRetryable bool `json:"unknownExitCodeRetryable,omitempty"`
	// BackoffBase and BackoffMax bound the backoff between reschedule rounds
	// of one job (--reschedule-backoff-base, --reschedule-backoff-max).
	BackoffBase *metav1.Duration `json:"backoffBase,omitempty"`
	BackoffMax  *metav1.Duration `json:"backoffMax,omitempty"`
	// ForceDeleteAfter: how long a node must have been unreachable before
	// pods on it may be force-deleted, bypassing PodDisruptionBudgets (--force-delete-after).
	ForceDeleteAfter *metav1.Duration `json:"forceDeleteAfter,omitempty"`
	// LeaseLostAfter: how long a node's kubelet may leave its Lease
	// unrenewed before the node counts as lost (--lease-lost-after).
	LeaseLostAfter *metav1.Duration `json:"leaseLostAfter,omitempty"`
	// NodeEvictionRate and NodeEvictionBurst: the token bucket on nodes acted
	// on, as kube-controller-manager's --node-eviction-rate (--node-eviction-rate,
	// --node-eviction-burst). A rate of 0 stops all action.
	NodeEvictionRate  *float64 `json:"nodeEvictionRate,omitempty"`
	NodeEvictionBurst int      `json:"nodeEvictionBurst,omitempty"`
	// UnhealthyZoneThreshold: the partition brake, as kube-controller-manager's
	// --unhealthy-zone-threshold (--unhealthy-zone-threshold). 1 disables it.
	UnhealthyZoneThreshold *float64 `json:"unhealthyZoneThreshold,omitempty"`
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
	// RequireDurable refuses training pods whose checkpoints would be lost
	// with the pod (no claim); false admits them with a warning, an Event
	// and a metric. The namespace annotation
	// trainguard.io/require-durable-checkpoints can only tighten it.
	RequireDurable bool `json:"requireDurable,omitempty"`
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
	// DefaultFor says which jobs get DefaultCount: AcceleratorJobs (the
	// default: only jobs that show they want an accelerator, see
	// docs/annotations.md) or AllJobs (every training container without one).
	DefaultFor string `json:"defaultFor,omitempty"`
}

// Values of GPUConfig.DefaultFor.
const (
	GPUDefaultForAcceleratorJobs = "AcceleratorJobs"
	GPUDefaultForAllJobs         = "AllJobs"
)

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

	// Rescheduler defaults (docs/rescheduler.md); rescheduler.DefaultOptions
	// is built from them.
	DefaultNodeLostGrace = 60 * time.Second
	DefaultGraceOverTime = 900 * time.Second
	DefaultBadNodeTTL    = time.Hour
	DefaultMaxBadNodes   = 16
	DefaultBackoffBase   = 10 * time.Second
	DefaultBackoffMax    = 5 * time.Minute

	// DefaultLeaseLostAfter is the kubelet's own node Lease duration
	// (nodeLeaseDurationSeconds): four renewals missed in a row. A kubelet
	// that is slow but alive renews within it and is never acted on.
	DefaultLeaseLostAfter = 40 * time.Second
	// DefaultForceDeleteAfter: a node unreachable this long (its kubelet
	// silent, or Ready not True) has its pods force-deleted, so the
	// replacement starts without waiting for a kubelet that may never come
	// back. Safe because a force-deleted pod that still runs (a partition)
	// can never commit over its replacement's checkpoints (fencing,
	// docs/checkpoint-protocol.md), and its kubelet kills it on return.
	// Kubernetes itself waits 300 s and then only evicts.
	DefaultForceDeleteAfter = 40 * time.Second
	// DefaultNodeEvictionRate is the node lifecycle controller's own
	// default: one node every 10 s.
	DefaultNodeEvictionRate = 0.1
	// DefaultNodeEvictionBurst lets an incident of up to 3 nodes (a rack, a
	// switch) be handled at once; the node lifecycle controller has a burst
	// of 1 but evicts only after 5 minutes, trainguard after 60 s.
	DefaultNodeEvictionBurst = 3
	// DefaultUnhealthyZoneThreshold is the node lifecycle controller's.
	DefaultUnhealthyZoneThreshold = 0.55
)

// DefaultConfig returns the configuration used when no file is given.
func DefaultConfig() *Config {
	c := &Config{}
	c.applyDefaults()
	return c
}

// Load reads a configuration file strictly: an unknown key is an error, so
// a typo never silently falls back to a default. warnings say what the
// caller must pass on to the user (a deprecated format).
func Load(path string) (cfg *Config, warnings []string, err error) {
	if path == "" {
		return DefaultConfig(), nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading config file: %w", err)
	}
	return Parse(data)
}

// Parse decodes, defaults and checks a configuration file's content.
func Parse(data []byte) (*Config, []string, error) {
	c := &Config{}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, nil, fmt.Errorf("parsing config file: %w", err)
	}
	var warnings []string
	switch {
	case c.APIVersion == ConfigAPIVersion && c.Kind == ConfigKind:
	case c.APIVersion == "" && c.Kind == "":
		warnings = append(warnings, fmt.Sprintf("the config file has no apiVersion and kind: this unversioned format is deprecated; "+
			"add `apiVersion: %s` and `kind: %s` at the top (nothing else changes)", ConfigAPIVersion, ConfigKind))
	default:
		return nil, nil, fmt.Errorf("config file: apiVersion %q kind %q is not supported; use apiVersion: %s, kind: %s",
			c.APIVersion, c.Kind, ConfigAPIVersion, ConfigKind)
	}
	c.applyDefaults()
	if errs := c.validate(); len(errs) > 0 {
		return nil, nil, fmt.Errorf("invalid config file: %w", errs.ToAggregate())
	}
	return c, warnings, nil
}

// LoadConfig is Load for callers with no user to warn (tests, tools).
func LoadConfig(path string) (*Config, error) {
	cfg, _, err := Load(path)
	return cfg, err
}

// ParseConfig is Parse for callers with no user to warn (tests, tools).
func ParseConfig(data []byte) (*Config, error) {
	cfg, _, err := Parse(data)
	return cfg, err
}

func (c *Config) applyDefaults() {
	c.APIVersion, c.Kind = ConfigAPIVersion, ConfigKind
	c.Rescheduler.applyDefaults()
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
	if c.GPU.DefaultFor == "" {
		c.GPU.DefaultFor = GPUDefaultForAcceleratorJobs
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
		c.Agent.InstallCommand = []string{"/" + contract.AgentBinaryName, "install"}
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

func (r *ReschedulerConfig) applyDefaults() {
	if r.Enabled == nil {
		on := true
		r.Enabled = &on
	}
	for _, d := range []struct {
		field **metav1.Duration
		def   time.Duration
	}{
		{&r.NodeLostGrace, DefaultNodeLostGrace}, {&r.GraceOverTime, DefaultGraceOverTime}, {&r.BadNodeTTL, DefaultBadNodeTTL},
		{&r.BackoffBase, DefaultBackoffBase}, {&r.BackoffMax, DefaultBackoffMax}, {&r.ForceDeleteAfter, DefaultForceDeleteAfter},
		{&r.LeaseLostAfter, DefaultLeaseLostAfter},
	} {
		if *d.field == nil {
			*d.field = &metav1.Duration{Duration: d.def}
		}
	}
	if r.MaxBadNodes == 0 {
		r.MaxBadNodes = DefaultMaxBadNodes
	}
	if r.NodeEvictionBurst == 0 {
		r.NodeEvictionBurst = DefaultNodeEvictionBurst
	}
	for _, f := range []struct {
		field **float64
		def   float64
	}{{&r.NodeEvictionRate, DefaultNodeEvictionRate}, {&r.UnhealthyZoneThreshold, DefaultUnhealthyZoneThreshold}} {
		if *f.field == nil {
			v := f.def
			*f.field = &v
		}
	}
}

// validate refuses settings the rescheduler cannot work with.
func (r *ReschedulerConfig) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, d := range map[string]*metav1.Duration{"nodeLostGrace": r.NodeLostGrace, "graceOverTime": r.GraceOverTime,
		"badNodeTTL": r.BadNodeTTL, "backoffBase": r.BackoffBase, "backoffMax": r.BackoffMax, "forceDeleteAfter": r.ForceDeleteAfter,
		"leaseLostAfter": r.LeaseLostAfter} {
		if d.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child(name), d.Duration.String(), "must be positive"))
		}
	}
	if r.MaxBadNodes < 1 {
		errs = append(errs, field.Invalid(p.Child("maxBadNodes"), r.MaxBadNodes, "must be at least 1"))
	}
	if r.BackoffMax.Duration < r.BackoffBase.Duration {
		errs = append(errs, field.Invalid(p.Child("backoffMax"), r.BackoffMax.Duration.String(), "must not be below backoffBase"))
	}
	sortErrors(errs)
	return errs
}

func sortErrors(errs field.ErrorList) {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
}

// defaulted reports whether applyDefaults ran (Resolve needs its pointers set).
func (c *Config) defaulted() bool {
	return c.Checkpoint.PreStopTimeout != nil && c.Checkpoint.GracePeriodMargin != nil && c.TaskD.Enabled != nil && c.GPU.DefaultCount != nil &&
		c.Rescheduler.Enabled != nil
}

// Excluded reports whether a namespace is never mutated.
func (c *Config) Excluded(namespace string) bool {
	return contains(c.ExcludedNamespaces, namespace)
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

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
		_, err := contract.ParseCheckpointClaim(c.Checkpoint.Claim)
		check(field.NewPath("checkpoint", "claim"), c.Checkpoint.Claim, err)
	}
	_, err := contract.ParseCheckpointPath(c.Checkpoint.Path)
	check(field.NewPath("checkpoint", "path"), c.Checkpoint.Path, err)
	_, err = contract.ParsePreStopTimeout(c.Checkpoint.PreStopTimeout.Duration.String())
	check(field.NewPath("checkpoint", "preStopTimeout"), c.Checkpoint.PreStopTimeout.Duration.String(), err)
	if c.Checkpoint.GracePeriodMargin.Duration < 0 {
		check(field.NewPath("checkpoint", "gracePeriodMargin"), c.Checkpoint.GracePeriodMargin.Duration.String(), fmt.Errorf("must not be negative"))
	}
	if c.TaskD.Port < 1 || c.TaskD.Port > 65535 {
		check(field.NewPath("taskd", "port"), fmt.Sprint(c.TaskD.Port), fmt.Errorf("must be between 1 and 65535"))
	}
	_, err = contract.ParseRecoverStrategy(c.RecoverStrategy)
	check(field.NewPath("recoverStrategy"), c.RecoverStrategy, err)
	_, err = contract.ParseFaultScheduling(c.FaultScheduling)
	check(field.NewPath("faultScheduling"), c.FaultScheduling, err)
	_, err = contract.ParseGPULimit(fmt.Sprint(*c.GPU.DefaultCount))
	check(field.NewPath("gpu", "defaultCount"), fmt.Sprint(*c.GPU.DefaultCount), err)
	if f := c.GPU.DefaultFor; f != GPUDefaultForAcceleratorJobs && f != GPUDefaultForAllJobs {
		errs = append(errs, field.NotSupported(field.NewPath("gpu", "defaultFor"), f, []string{GPUDefaultForAcceleratorJobs, GPUDefaultForAllJobs}))
	}
	if !path.IsAbs(c.Agent.Path) || path.Clean(c.Agent.Path) != c.Agent.Path {
		check(field.NewPath("agent", "path"), c.Agent.Path, fmt.Errorf("must be an absolute, clean path"))
	}
	for name := range c.Mutators {
		if !contains(contract.Injections(), name) {
			check(field.NewPath("mutators").Key(name), name, fmt.Errorf("unknown injection; use one of %v", contract.Injections()))
		}
	}
	if c.MaxReschedules < 0 {
		check(field.NewPath("maxReschedules"), fmt.Sprint(c.MaxReschedules), fmt.Errorf("must not be negative"))
	}
	return append(errs, c.Rescheduler.validate(field.NewPath("rescheduler"))...)
}
