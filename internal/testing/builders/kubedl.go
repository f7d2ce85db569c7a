package builders

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/kubedl/v1alpha1"
)

// KubeDLJobWrapper builds a training.kubedl.io/v1alpha1 PyTorchJob.
type KubeDLJobWrapper struct{ kubedlv1alpha1.PyTorchJob }

// MakeKubeDLJob is a valid elastic job like KubeDL's tutorial's.
func MakeKubeDLJob(ns, name string) *KubeDLJobWrapper {
	return &KubeDLJobWrapper{kubedlv1alpha1.PyTorchJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "training.kubedl.io/v1alpha1", Kind: "PyTorchJob"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kubedlv1alpha1.PyTorchJobSpec{
			EnableElastic: true,
			ElasticPolicy: &kubedlv1alpha1.ElasticPolicy{
				RDZVBackend: "etcd", RDZVEndpoint: "etcd-service:2379",
				MinReplicas: Ptr[int32](1), MaxReplicas: Ptr[int32](3), NProcPerNode: Ptr[int32](1),
			},
			PyTorchReplicaSpecs: map[string]*kubedlv1alpha1.ReplicaSpec{
				"Master": {Replicas: Ptr[int32](1), Template: Template(Container("pytorch"))},
				"Worker": {Replicas: Ptr[int32](1), Template: Template(Container("pytorch"))},
			},
		},
	}}
}

// With applies f to the job.
func (w *KubeDLJobWrapper) With(f func(*kubedlv1alpha1.PyTorchJob)) *KubeDLJobWrapper {
	f(&w.PyTorchJob)
	return w
}

// WithPolicy applies f to the elastic policy.
func (w *KubeDLJobWrapper) WithPolicy(f func(*kubedlv1alpha1.ElasticPolicy)) *KubeDLJobWrapper {
	f(w.Spec.ElasticPolicy)
	return w
}

// WithAnnotation sets one annotation on the job.
func (w *KubeDLJobWrapper) WithAnnotation(k, v string) *KubeDLJobWrapper {
	setKey(&w.Annotations, k, v)
	return w
}

// WithExitCodeWorkers is n Workers, no Master, not elastic, restarted by
// exit code: the kubeflow job of KubeflowJobWrapper.WithExitCodeWorkers
// under KubeDL's API.
func (w *KubeDLJobWrapper) WithExitCodeWorkers(n int32) *KubeDLJobWrapper {
	w.Spec = kubedlv1alpha1.PyTorchJobSpec{PyTorchReplicaSpecs: map[string]*kubedlv1alpha1.ReplicaSpec{
		"Worker": {Replicas: &n, RestartPolicy: "ExitCode", Template: Template(Container("pytorch"))},
	}}
	return w
}

// Unstructured is the job as the suites create it without KubeDL's Go types.
func (w *KubeDLJobWrapper) Unstructured() *unstructured.Unstructured { return toUnstructured(w.JSON()) }

// JSON returns the job as the API server would send it.
func (w *KubeDLJobWrapper) JSON() []byte { return MustJSON(&w.PyTorchJob) }

// GVK is training.kubedl.io/v1alpha1 PyTorchJob.
func (w *KubeDLJobWrapper) GVK() schema.GroupVersionKind { return w.GroupVersionKind() }
