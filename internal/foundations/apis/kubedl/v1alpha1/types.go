// Package v1alpha1 is a partial copy of KubeDL's training.kubedl.io/v1alpha1
// PyTorchJob: only the fields trainguard mutates or validates.
package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion of KubeDL's training API.
var GroupVersion = schema.GroupVersion{Group: "training.kubedl.io", Version: "v1alpha1"}

// Kind of the job.
const Kind = "PyTorchJob"

// AnnotationEnableElastic is KubeDL's switch for elastic training.
const AnnotationEnableElastic = "kubedl.io/enable-elastic-training"

// PyTorchJob is a training.kubedl.io/v1alpha1 PyTorchJob.
type PyTorchJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PyTorchJobSpec `json:"spec,omitempty"`
}

// PyTorchJobSpec holds the replica templates and the elastic policy.
type PyTorchJobSpec struct {
	EnableElastic       bool                    `json:"enableElastic,omitempty"`
	ElasticPolicy       *ElasticPolicy          `json:"elasticPolicy,omitempty"`
	PyTorchReplicaSpecs map[string]*ReplicaSpec `json:"pytorchReplicaSpecs,omitempty"`
}

// ReplicaSpec is one replica type's count, pod template and restart policy.
type ReplicaSpec struct {
	Replicas      *int32                 `json:"replicas,omitempty"`
	Template      corev1.PodTemplateSpec `json:"template,omitempty"`
	RestartPolicy string                 `json:"restartPolicy,omitempty"`
}

// ElasticPolicy is KubeDL's rendezvous configuration.
type ElasticPolicy struct {
	RDZVBackend  string `json:"rdzvBackend,omitempty"`
	RDZVEndpoint string `json:"rdzvEndpoint,omitempty"`
	MinReplicas  *int32 `json:"minReplicas,omitempty"`
	MaxReplicas  *int32 `json:"maxReplicas,omitempty"`
	NProcPerNode *int32 `json:"nProcPerNode,omitempty"`
	MaxRestarts  *int32 `json:"maxRestarts,omitempty"`
}
