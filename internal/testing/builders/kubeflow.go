package builders

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// KubeflowJobWrapper builds a kubeflow.org/v1 PyTorchJob.
type KubeflowJobWrapper struct{ kubeflowv1.PyTorchJob }

// MakeKubeflowJob is a valid job: one Master and one Worker, each with a
// pytorch container.
func MakeKubeflowJob(ns, name string) *KubeflowJobWrapper {
	w := &KubeflowJobWrapper{kubeflowv1.PyTorchJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[string]*kubeflowv1.ReplicaSpec{}},
	}}
	return w.WithMaster(Ptr[int32](1)).WithWorker(1)
}

// With applies f to the job.
func (w *KubeflowJobWrapper) With(f func(*kubeflowv1.PyTorchJob)) *KubeflowJobWrapper {
	f(&w.PyTorchJob)
	return w
}

// WithName renames the job.
func (w *KubeflowJobWrapper) WithName(name string) *KubeflowJobWrapper { w.Name = name; return w }

// WithAnnotation sets one annotation on the job.
func (w *KubeflowJobWrapper) WithAnnotation(k, v string) *KubeflowJobWrapper {
	setKey(&w.Annotations, k, v)
	return w
}

// WithLabel sets one label on the job.
func (w *KubeflowJobWrapper) WithLabel(k, v string) *KubeflowJobWrapper {
	setKey(&w.Labels, k, v)
	return w
}

// Replica returns the replica spec of rt, adding one with a pytorch container if absent.
func (w *KubeflowJobWrapper) Replica(rt string) *kubeflowv1.ReplicaSpec {
	rs := w.Spec.PyTorchReplicaSpecs[rt]
	if rs == nil {
		rs = &kubeflowv1.ReplicaSpec{Template: Template(Container("pytorch"))}
		w.Spec.PyTorchReplicaSpecs[rt] = rs
	}
	return rs
}

// WithMaster sets the Master replica count; nil leaves it unset.
func (w *KubeflowJobWrapper) WithMaster(n *int32) *KubeflowJobWrapper {
	w.Replica(kubeflowv1.ReplicaMaster).Replicas = n
	return w
}

// WithWorker sets the Worker replica count.
func (w *KubeflowJobWrapper) WithWorker(n int32) *KubeflowJobWrapper {
	w.Replica(kubeflowv1.ReplicaWorker).Replicas = &n
	return w
}

// WithoutReplica removes a replica type.
func (w *KubeflowJobWrapper) WithoutReplica(rt string) *KubeflowJobWrapper {
	delete(w.Spec.PyTorchReplicaSpecs, rt)
	return w
}

// WithReplica applies f to the replica spec of rt.
func (w *KubeflowJobWrapper) WithReplica(rt string, f func(*kubeflowv1.ReplicaSpec)) *KubeflowJobWrapper {
	f(w.Replica(rt))
	return w
}

// WithWorkerContainer changes the Worker's first container.
func (w *KubeflowJobWrapper) WithWorkerContainer(f func(*corev1.Container)) *KubeflowJobWrapper {
	f(&w.Replica(kubeflowv1.ReplicaWorker).Template.Spec.Containers[0])
	return w
}

// WithElastic makes the job elastic between minR and maxR Workers (no Master).
func (w *KubeflowJobWrapper) WithElastic(minR, maxR int32) *KubeflowJobWrapper {
	return w.WithoutReplica(kubeflowv1.ReplicaMaster).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
		ep.MinReplicas, ep.MaxReplicas = &minR, &maxR
	})
}

// WithPolicy applies f to the elastic policy, adding an empty one if absent.
func (w *KubeflowJobWrapper) WithPolicy(f func(*kubeflowv1.ElasticPolicy)) *KubeflowJobWrapper {
	if w.Spec.ElasticPolicy == nil {
		w.Spec.ElasticPolicy = &kubeflowv1.ElasticPolicy{}
	}
	f(w.Spec.ElasticPolicy)
	return w
}

// WithNproc sets spec.nprocPerNode.
func (w *KubeflowJobWrapper) WithNproc(s string) *KubeflowJobWrapper {
	w.Spec.NprocPerNode = &s
	return w
}

// WithManagedBy sets spec.runPolicy.managedBy.
func (w *KubeflowJobWrapper) WithManagedBy(s string) *KubeflowJobWrapper {
	w.Spec.RunPolicy = &kubeflowv1.RunPolicy{ManagedBy: &s}
	return w
}

// WithCheckpointVolume adds trainguard's checkpoint PVC to the Worker template.
func (w *KubeflowJobWrapper) WithCheckpointVolume() *KubeflowJobWrapper {
	tpl := &w.Replica(kubeflowv1.ReplicaWorker).Template.Spec
	tpl.Volumes = append(tpl.Volumes, corev1.Volume{
		Name:         contract.CheckpointVolumeName,
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "ckpt"}},
	})
	return w
}

// Realistic pads every replica's template as PodWrapper.Realistic pads a
// pod (about 8 KB each): the benchmarks' job.
func (w *KubeflowJobWrapper) Realistic() *KubeflowJobWrapper {
	for _, rs := range w.Spec.PyTorchReplicaSpecs {
		realisticPod(&rs.Template.ObjectMeta, &rs.Template.Spec)
		delete(rs.Template.Labels, kubeflowv1.LabelJobName) // the operator sets it per pod
	}
	return w
}

// Obj returns the job.
func (w *KubeflowJobWrapper) Obj() *kubeflowv1.PyTorchJob { return &w.PyTorchJob }

// JSON returns the job as the API server would send it.
func (w *KubeflowJobWrapper) JSON() []byte { return MustJSON(&w.PyTorchJob) }

// GVK is kubeflow.org/v1 PyTorchJob.
func (w *KubeflowJobWrapper) GVK() schema.GroupVersionKind { return w.GroupVersionKind() }

// Unstructured is the job as a client sends it without kubeflow's Go
// types (the suites create it through a real API server).
func (w *KubeflowJobWrapper) Unstructured() *unstructured.Unstructured {
	return toUnstructured(w.JSON())
}

// WithExitCodeWorkers is n Workers, no Master, restarted by exit code
// (kubeflow's ExitCode policy), as the rescheduler's suites run jobs.
func (w *KubeflowJobWrapper) WithExitCodeWorkers(n int32) *KubeflowJobWrapper {
	return w.WithoutReplica("Master").WithWorker(n).WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) {
		rs.RestartPolicy = kubeflowv1.RestartPolicyExitCode
	})
}
