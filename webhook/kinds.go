package webhook

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/apis/kubeflow/v1"
)

// Kind is an object kind trainguard handles.
type Kind int

// Handled kinds.
const (
	KindUnknown Kind = iota
	KindKubeflowPyTorchJob
	KindKubeDLPyTorchJob
	KindPod
	KindNamespace
)

// KindOf maps a group/version/kind to a handled Kind.
func KindOf(gvk schema.GroupVersionKind) Kind {
	switch {
	case gvk.GroupVersion() == kubeflowv1.GroupVersion && gvk.Kind == kubeflowv1.Kind:
		return KindKubeflowPyTorchJob
	case gvk.GroupVersion() == kubedlv1alpha1.GroupVersion && gvk.Kind == kubedlv1alpha1.Kind:
		return KindKubeDLPyTorchJob
	case gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Pod":
		return KindPod
	case gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Namespace":
		return KindNamespace
	}
	return KindUnknown
}

// String names the kind for logs and metrics.
func (k Kind) String() string {
	switch k {
	case KindKubeflowPyTorchJob:
		return "kubeflow.org/v1/PyTorchJob"
	case KindKubeDLPyTorchJob:
		return "training.kubedl.io/v1alpha1/PyTorchJob"
	case KindPod:
		return "v1/Pod"
	case KindNamespace:
		return "v1/Namespace"
	}
	return "unknown"
}
