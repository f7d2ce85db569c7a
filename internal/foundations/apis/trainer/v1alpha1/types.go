// Package v1alpha1 is a partial copy of Kubeflow Trainer v2's
// trainer.kubeflow.org/v1alpha1 API (TrainJob, TrainingRuntime,
// ClusterTrainingRuntime, as of Trainer v2.0.0): only the fields trainguard
// validates or reads to recognise a TrainJob's pods. trainguard never
// re-serialises these types over a user's object (it patches, or does not
// mutate these kinds at all), so undeclared fields survive.
//
// Trainer changed this API without a new version; the types decode every
// tested release (v2.0.0 and v2.3.0): v2.2 removed the runtime's
// mlPolicy.torch.numProcPerNode and elasticPolicy (on such a cluster the
// API server prunes them before trainguard sees the object, so they are
// simply nil) and made the TrainJob's spec.trainer.numProcPerNode an
// int32, which IntOrString decodes too. Fields only newer releases have
// (runtimePatches, jax, xgboost, flux) are not declared here; `validate`
// judges them against each release's CRD (internal/foundations/crdfields). docs/trainjob.md#trainer-versions has the whole list.
//
// The runtime's JobSet template is declared down to the pod templates of its
// replicated jobs, which is all trainguard needs of sigs.k8s.io/jobset.
package v1alpha1

import (
	"errors"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// GroupVersion of Kubeflow Trainer v2.
var GroupVersion = schema.GroupVersion{Group: "trainer.kubeflow.org", Version: "v1alpha1"}

// Kinds.
const (
	TrainJobKind               = "TrainJob"
	TrainingRuntimeKind        = "TrainingRuntime"
	ClusterTrainingRuntimeKind = "ClusterTrainingRuntime"
)

// Names and values Trainer v2 gives to what it creates.
const (
	// LabelTrainJobAncestor marks a runtime's replicated job with the step it
	// runs: "trainer", "dataset-initializer" or "model-initializer".
	LabelTrainJobAncestor = "trainer.kubeflow.org/trainjob-ancestor-step"
	AncestorTrainer       = "trainer"
	DatasetInitializer    = "dataset-initializer"
	ModelInitializer      = "model-initializer"
	// Node is the name of the trainer's replicated job and container.
	Node = "node"
	// Launcher is the MPI launcher's replicated job.
	Launcher = "launcher"
	// DefaultManagedBy is the built-in TrainJob controller.
	DefaultManagedBy    = "trainer.kubeflow.org/trainjob-controller"
	MultiKueueManagedBy = "kueue.x-k8s.io/multikueue"
)

// JobSet (sigs.k8s.io/jobset v0.8 and later), which runs a TrainJob: its
// API and the labels it puts on every pod. A TrainJob's JobSet carries the
// TrainJob's name.
const (
	JobSetAPIVersion         = "jobset.x-k8s.io/v1alpha2"
	JobSetKind               = "JobSet"
	LabelJobSetName          = "jobset.sigs.k8s.io/jobset-name"
	LabelJobSetReplicatedJob = "jobset.sigs.k8s.io/replicatedjob-name"
	LabelJobSetJobIndex      = "jobset.sigs.k8s.io/job-index"
)

// TrainJob is a trainer.kubeflow.org/v1alpha1 TrainJob.
type TrainJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TrainJobSpec `json:"spec,omitempty"`
}

// TrainJobSpec is the part of a TrainJob's spec trainguard reads.
type TrainJobSpec struct {
	RuntimeRef       RuntimeRef        `json:"runtimeRef"`
	Initializer      *Initializer      `json:"initializer,omitempty"`
	Trainer          *Trainer          `json:"trainer,omitempty"`
	PodSpecOverrides []PodSpecOverride `json:"podSpecOverrides,omitempty"`
	ManagedBy        *string           `json:"managedBy,omitempty"`
}

// RuntimeRef names the runtime a TrainJob runs on.
type RuntimeRef struct {
	Name string `json:"name"`
	// APIGroup defaults to trainer.kubeflow.org.
	APIGroup *string `json:"apiGroup,omitempty"`
	// Kind defaults to ClusterTrainingRuntime.
	Kind *string `json:"kind,omitempty"`
}

// Initializer configures the dataset and model initializers; trainguard
// reads only whether each is set.
type Initializer struct {
	Dataset *InitializerSource `json:"dataset,omitempty"`
	Model   *InitializerSource `json:"model,omitempty"`
}

// InitializerSource is a dataset or model initializer.
type InitializerSource struct {
	StorageURI *string         `json:"storageUri,omitempty"`
	Env        []corev1.EnvVar `json:"env,omitempty"`
}

// Trainer overrides the runtime's trainer node.
type Trainer struct {
	Image            *string                      `json:"image,omitempty"`
	Command          []string                     `json:"command,omitempty"`
	Args             []string                     `json:"args,omitempty"`
	Env              []corev1.EnvVar              `json:"env,omitempty"`
	NumNodes         *int32                       `json:"numNodes,omitempty"`
	ResourcesPerNode *corev1.ResourceRequirements `json:"resourcesPerNode,omitempty"`
	NumProcPerNode   *IntOrString                 `json:"numProcPerNode,omitempty"`
}

// PodSpecOverride is a TrainJob's override of some runtime jobs' pods.
type PodSpecOverride struct {
	TargetJobs     []PodSpecOverrideTargetJob `json:"targetJobs"`
	InitContainers []ContainerOverride        `json:"initContainers,omitempty"`
	Containers     []ContainerOverride        `json:"containers,omitempty"`
}

// PodSpecOverrideTargetJob names a replicated job of the runtime.
type PodSpecOverrideTargetJob struct {
	Name string `json:"name"`
}

// ContainerOverride overrides one container of the target jobs.
type ContainerOverride struct {
	Name         string               `json:"name"`
	Env          []corev1.EnvVar      `json:"env,omitempty"`
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`
}

// TrainingRuntime is a namespaced trainer.kubeflow.org/v1alpha1 TrainingRuntime.
type TrainingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TrainingRuntimeSpec `json:"spec,omitempty"`
}

// ClusterTrainingRuntime is the cluster-scoped TrainingRuntime.
type ClusterTrainingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TrainingRuntimeSpec `json:"spec,omitempty"`
}

// TrainingRuntimeSpec holds the ML policy and the JobSet template.
type TrainingRuntimeSpec struct {
	MLPolicy *MLPolicy          `json:"mlPolicy,omitempty"`
	Template JobSetTemplateSpec `json:"template"`
}

// JobSetTemplateSpec is the JobSet every TrainJob of the runtime gets.
type JobSetTemplateSpec struct {
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              JobSetSpec `json:"spec,omitempty"`
}

// JobSetSpec is the part of sigs.k8s.io/jobset v1alpha2 JobSetSpec trainguard reads.
type JobSetSpec struct {
	ReplicatedJobs []ReplicatedJob `json:"replicatedJobs,omitempty"`
}

// ReplicatedJob is a group of identical Jobs in a JobSet.
type ReplicatedJob struct {
	Name string `json:"name"`
	// Template is a batch/v1 JobTemplateSpec, partially declared.
	Template JobTemplateSpec `json:"template"`
	// Replicas defaults to 1 (JobSet's defaulting); nil means 1.
	Replicas *int32 `json:"replicas,omitempty"`
}

// JobTemplateSpec is the part of batch/v1 JobTemplateSpec trainguard reads.
type JobTemplateSpec struct {
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              JobSpec `json:"spec,omitempty"`
}

// JobSpec is the part of batch/v1 JobSpec trainguard reads.
type JobSpec struct {
	// PodFailurePolicy decides whether a pod evicted for a node fault
	// (condition DisruptionTarget) counts against backoffLimit.
	PodFailurePolicy *batchv1.PodFailurePolicy `json:"podFailurePolicy,omitempty"`
	Template         corev1.PodTemplateSpec    `json:"template"`
}

// MLPolicy is the runtime's ML configuration.
type MLPolicy struct {
	NumNodes *int32               `json:"numNodes,omitempty"`
	Torch    *TorchMLPolicySource `json:"torch,omitempty"`
	MPI      *MPIMLPolicySource   `json:"mpi,omitempty"`
}

// TorchMLPolicySource configures torchrun.
type TorchMLPolicySource struct {
	NumProcPerNode *IntOrString        `json:"numProcPerNode,omitempty"`
	ElasticPolicy  *TorchElasticPolicy `json:"elasticPolicy,omitempty"`
}

// TorchElasticPolicy is torchrun's elastic range (--nnodes=min:max), its
// restart budget and the autoscaler's metrics.
type TorchElasticPolicy struct {
	MaxRestarts *int32                     `json:"maxRestarts,omitempty"`
	MinNodes    *int32                     `json:"minNodes,omitempty"`
	MaxNodes    *int32                     `json:"maxNodes,omitempty"`
	Metrics     []autoscalingv2.MetricSpec `json:"metrics,omitempty"`
}

// MPIMLPolicySource configures MPI.
type MPIMLPolicySource struct {
	NumProcPerNode    *int32  `json:"numProcPerNode,omitempty"`
	MPIImplementation *string `json:"mpiImplementation,omitempty"`
	RunLauncherAsNode *bool   `json:"runLauncherAsNode,omitempty"`
}

// IntOrString is intstr.IntOrString with a decoder that refuses empty
// input: intstr's own UnmarshalJSON indexes its first byte, and the
// webhook's streaming decoder hands it an empty value for a truncated
// document (found by FuzzValidateTrainer).
type IntOrString struct{ intstr.IntOrString }

// UnmarshalJSON implements json.Unmarshaler.
func (i *IntOrString) UnmarshalJSON(b []byte) error {
	if len(b) == 0 {
		return errEmptyIntOrString
	}
	return i.IntOrString.UnmarshalJSON(b)
}

// MarshalJSON implements json.Marshaler.
func (i IntOrString) MarshalJSON() ([]byte, error) { return i.IntOrString.MarshalJSON() }

var errEmptyIntOrString = errors.New("int or string: empty value") // immutable sentinel error.
