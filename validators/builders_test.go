package validators

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/contract"
)

// Builder-style fixtures: each starts from a valid object and changes one thing.

func ptr[T any](v T) *T { return &v }

func container(name string) corev1.Container {
	return corev1.Container{Name: name, Image: "ghcr.io/example/train:1"}
}

func template(containers ...corev1.Container) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers}}
}

// kfJob builds a kubeflow.org/v1 PyTorchJob.
type kfJob struct{ j kubeflowv1.PyTorchJob }

// job is a valid job: one Master and one Worker, each with a pytorch container.
func job() *kfJob {
	b := &kfJob{j: kubeflowv1.PyTorchJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"},
		Spec:       kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[string]*kubeflowv1.ReplicaSpec{}},
	}}
	return b.withMaster(ptr[int32](1)).withWorker(1)
}

func (b *kfJob) with(f func(*kubeflowv1.PyTorchJob)) *kfJob { f(&b.j); return b }

func (b *kfJob) withName(name string) *kfJob { b.j.Name = name; return b }

func (b *kfJob) withAnnotation(k, v string) *kfJob {
	if b.j.Annotations == nil {
		b.j.Annotations = map[string]string{}
	}
	b.j.Annotations[k] = v
	return b
}

func (b *kfJob) withLabel(k, v string) *kfJob {
	if b.j.Labels == nil {
		b.j.Labels = map[string]string{}
	}
	b.j.Labels[k] = v
	return b
}

func (b *kfJob) replica(rt string) *kubeflowv1.ReplicaSpec {
	rs := b.j.Spec.PyTorchReplicaSpecs[rt]
	if rs == nil {
		rs = &kubeflowv1.ReplicaSpec{Template: template(container("pytorch"))}
		b.j.Spec.PyTorchReplicaSpecs[rt] = rs
	}
	return rs
}

// withMaster sets the Master replica count; nil leaves it unset.
func (b *kfJob) withMaster(n *int32) *kfJob { b.replica("Master").Replicas = n; return b }

func (b *kfJob) withWorker(n int32) *kfJob { b.replica("Worker").Replicas = &n; return b }

func (b *kfJob) withoutReplica(rt string) *kfJob {
	delete(b.j.Spec.PyTorchReplicaSpecs, rt)
	return b
}

func (b *kfJob) withReplica(rt string, f func(*kubeflowv1.ReplicaSpec)) *kfJob {
	f(b.replica(rt))
	return b
}

// withWorkerContainer changes the Worker's first container.
func (b *kfJob) withWorkerContainer(f func(*corev1.Container)) *kfJob {
	f(&b.replica("Worker").Template.Spec.Containers[0])
	return b
}

func (b *kfJob) withElastic(minR, maxR int32) *kfJob {
	return b.withoutReplica("Master").withPolicy(func(ep *kubeflowv1.ElasticPolicy) {
		ep.MinReplicas, ep.MaxReplicas = &minR, &maxR
	})
}

func (b *kfJob) withPolicy(f func(*kubeflowv1.ElasticPolicy)) *kfJob {
	if b.j.Spec.ElasticPolicy == nil {
		b.j.Spec.ElasticPolicy = &kubeflowv1.ElasticPolicy{}
	}
	f(b.j.Spec.ElasticPolicy)
	return b
}

func (b *kfJob) withNproc(s string) *kfJob { b.j.Spec.NprocPerNode = &s; return b }

func (b *kfJob) withManagedBy(s string) *kfJob {
	b.j.Spec.RunPolicy = &kubeflowv1.RunPolicy{ManagedBy: &s}
	return b
}

// updatedFrom makes obj an UPDATE of old.
func updatedFrom(obj Object, old *kfJob) Object {
	obj.OldRaw = old.object().Raw
	return obj
}

// withCheckpointVolume adds trainguard's checkpoint PVC to the Worker template.
func (b *kfJob) withCheckpointVolume() *kfJob {
	w := b.replica("Worker")
	w.Template.Spec.Volumes = append(w.Template.Spec.Volumes, corev1.Volume{
		Name:         "trainguard-checkpoint",
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "ckpt"}},
	})
	return b
}

func (b *kfJob) object() Object {
	return Object{GVK: b.j.GroupVersionKind(), Raw: mustJSON(&b.j)}
}

// dlJob builds a training.kubedl.io/v1alpha1 PyTorchJob.
type dlJob struct{ j kubedlv1alpha1.PyTorchJob }

// kubedlJob is a valid elastic job like KubeDL's tutorial's.
func kubedlJob() *dlJob {
	return &dlJob{j: kubedlv1alpha1.PyTorchJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "training.kubedl.io/v1alpha1", Kind: "PyTorchJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "resnet", Namespace: "elastic-job"},
		Spec: kubedlv1alpha1.PyTorchJobSpec{
			EnableElastic: true,
			ElasticPolicy: &kubedlv1alpha1.ElasticPolicy{
				RDZVBackend: "etcd", RDZVEndpoint: "etcd-service:2379",
				MinReplicas: ptr[int32](1), MaxReplicas: ptr[int32](3), NProcPerNode: ptr[int32](1),
			},
			PyTorchReplicaSpecs: map[string]*kubedlv1alpha1.ReplicaSpec{
				"Master": {Replicas: ptr[int32](1), Template: template(container("pytorch"))},
				"Worker": {Replicas: ptr[int32](1), Template: template(container("pytorch"))},
			},
		},
	}}
}

func (b *dlJob) with(f func(*kubedlv1alpha1.PyTorchJob)) *dlJob { f(&b.j); return b }

func (b *dlJob) withPolicy(f func(*kubedlv1alpha1.ElasticPolicy)) *dlJob {
	f(b.j.Spec.ElasticPolicy)
	return b
}

func (b *dlJob) withAnnotation(k, v string) *dlJob {
	if b.j.Annotations == nil {
		b.j.Annotations = map[string]string{}
	}
	b.j.Annotations[k] = v
	return b
}

func (b *dlJob) object() Object {
	return Object{GVK: b.j.GroupVersionKind(), Raw: mustJSON(&b.j)}
}

// podBuilder builds a v1 Pod.
type podBuilder struct{ p corev1.Pod }

func pod() *podBuilder {
	return &podBuilder{p: corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "train-worker-0", Namespace: "ml"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{container("pytorch")}},
	}}
}

func (b *podBuilder) with(f func(*corev1.Pod)) *podBuilder { f(&b.p); return b }

// injected marks the pod as the mutating webhook leaves it.
func (b *podBuilder) injected() *podBuilder {
	return b.withAnnotation(contract.AnnotationInjected, "prestop,taskd")
}

func (b *podBuilder) withAnnotation(k, v string) *podBuilder {
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[k] = v
	return b
}

func (b *podBuilder) withPorts(ports ...corev1.ContainerPort) *podBuilder {
	b.p.Spec.Containers[0].Ports = ports
	return b
}

func (b *podBuilder) object() Object {
	return Object{GVK: corev1.SchemeGroupVersion.WithKind("Pod"), Raw: mustJSON(&b.p)}
}

func namespaceObject(annotations, labels map[string]string) Object {
	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: "ml", Annotations: annotations, Labels: labels},
	}
	return Object{GVK: corev1.SchemeGroupVersion.WithKind("Namespace"), Raw: mustJSON(ns)}
}

func gpuLimit(n int64) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(n, resource.DecimalSI)}}
}

// mustJSON marshals a typed fixture; that cannot fail for these types.
func mustJSON(v interface{}) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return raw
}

// paths lists the field paths of errs, in order.
func paths(errs field.ErrorList) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, e.Field)
	}
	return out
}

// validate runs the default validator and fails the test on a decode error.
func validate(t testing.TB, obj Object) Result {
	t.Helper()
	res, err := New(nil).Validate(obj)
	require.NoError(t, err)
	return res
}
