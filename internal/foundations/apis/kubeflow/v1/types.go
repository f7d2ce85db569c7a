// Package v1 is a partial copy of kubeflow.org/v1 PyTorchJob: only the fields
// trainguard mutates or validates.
package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion of kubeflow's training operator.
var GroupVersion = schema.GroupVersion{Group: "kubeflow.org", Version: "v1"}

// Kind of the job.
const Kind = "PyTorchJob"

// Labels the training operator puts on every pod of a job.
const (
	// LabelJobName holds the job's name (training-operator v1.7 and later).
	LabelJobName = "training.kubeflow.org/job-name"
	// LabelLegacyJobName holds it before v1.7, and on KubeDL's pods, which
	// say whose they are with LabelGroupName.
	LabelLegacyJobName = "job-name"
	LabelGroupName     = "group-name"
)

// Replica types kubeflow accepts in pytorchReplicaSpecs.
const (
	ReplicaMaster = "Master"
	ReplicaWorker = "Worker"
)

// PyTorchJob is a kubeflow.org/v1 PyTorchJob.
type PyTorchJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PyTorchJobSpec `json:"spec,omitempty"`
}

// PyTorchJobSpec holds the replica templates and the elastic policy.
type PyTorchJobSpec struct {
	ElasticPolicy       *ElasticPolicy          `json:"elasticPolicy,omitempty"`
	PyTorchReplicaSpecs map[string]*ReplicaSpec `json:"pytorchReplicaSpecs,omitempty"`
	NprocPerNode        *string                 `json:"nprocPerNode,omitempty"`
	// RunPolicy is a pointer so that a job without one round-trips without
	// gaining an empty runPolicy.
	RunPolicy *RunPolicy `json:"runPolicy,omitempty"`
}

// RunPolicy holds the job-level run settings; only managedBy is declared.
type RunPolicy struct {
	// ManagedBy names the controller reconciling the job (kubeflow v1.9+).
	ManagedBy *string `json:"managedBy,omitempty"`
}

// Controllers kubeflow accepts in spec.runPolicy.managedBy.
const (
	KubeflowJobsController = "kubeflow.org/training-operator"
	MultiKueueController   = "kueue.x-k8s.io/multikueue"
)

// ReplicaSpec is one replica type's count, pod template and restart policy.
type ReplicaSpec struct {
	Replicas      *int32                 `json:"replicas,omitempty"`
	Template      corev1.PodTemplateSpec `json:"template,omitempty"`
	RestartPolicy string                 `json:"restartPolicy,omitempty"`
}

// Replica restart policies the operator gives meaning to beyond a pod's:
// ExitCode retries only retryable exit codes (its pods run with Never), and
// an unset one is defaulted to OnFailure (training-operator v1.9's
// PyTorchJobDefaultRestartPolicy).
const (
	RestartPolicyExitCode          = "ExitCode"
	PyTorchJobDefaultRestartPolicy = "OnFailure"
)

// ElasticPolicy configures torchrun's elastic rendezvous.
type ElasticPolicy struct {
	MinReplicas  *int32      `json:"minReplicas,omitempty"`
	MaxReplicas  *int32      `json:"maxReplicas,omitempty"`
	RDZVBackend  *string     `json:"rdzvBackend,omitempty"`
	RDZVPort     *int32      `json:"rdzvPort,omitempty"`
	RDZVHost     *string     `json:"rdzvHost,omitempty"`
	RDZVID       *string     `json:"rdzvId,omitempty"`
	RDZVConf     []RDZVConf  `json:"rdzvConf,omitempty"`
	Standalone   *bool       `json:"standalone,omitempty"`
	NProcPerNode *int32      `json:"nProcPerNode,omitempty"`
	MaxRestarts  *int32      `json:"maxRestarts,omitempty"`
	Metrics      []MetricRaw `json:"metrics,omitempty"`
}

// RDZVConf is one rendezvous key/value.
type RDZVConf struct {
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
}

// MetricRaw keeps an autoscaling metric opaque: trainguard only counts them.
type MetricRaw map[string]interface{}
