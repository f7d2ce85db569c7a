package jobs

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// KubeflowPyTorchJob is kubeflow.org/v1 PyTorchJob. Its operator names
// each pod's job in training.kubeflow.org/job-name (v1.7 and later) or
// job-name (before), so both name the checkpoint directory and tell the
// rescheduler the job of a pod without an owner reference.
func KubeflowPyTorchJob() *Adapter {
	k := operatorKind(kubeflowv1.GroupVersion.WithKind(kubeflowv1.Kind), "pytorchjob", func(obj *kubeflowv1.PyTorchJob) (Job, error) {
		return operatorJob[kubeflowv1.PyTorchJob, kubeflowSchema]{obj}, validReplicaKeys(obj.Spec.PyTorchReplicaSpecs, replicaSpecsPath())
	}, validateKubeflowJob, kubeflowJobOfPod)
	k.ValidateUpdate = func(cur, old Job) field.ErrorList {
		return validateKubeflowUpdate(objectOf[kubeflowv1.PyTorchJob](cur), objectOf[kubeflowv1.PyTorchJob](old))
	}
	return k
}

// kubeflowSchema says where a kubeflow PyTorchJob keeps what a Job reads.
type kubeflowSchema struct{}

func (kubeflowSchema) meta(obj *kubeflowv1.PyTorchJob) *metav1.ObjectMeta { return &obj.ObjectMeta }

func (kubeflowSchema) templates(obj *kubeflowv1.PyTorchJob) []Template {
	return ReplicaTemplates(obj.Spec.PyTorchReplicaSpecs, func(r *kubeflowv1.ReplicaSpec) *corev1.PodTemplateSpec { return &r.Template },
		kubeflowPodRestartPolicy, replicaSpecsPath())
}

// kubeflowPodRestartPolicy is the restartPolicy kubeflow's operator gives
// a replica's pods (training-operator pkg/core SetRestartPolicy, which
// overrides the template's own): ExitCode runs as Never (the operator
// reads the exit code), every other value as itself. Unset is the
// operator's default, OnFailure (PyTorchJobDefaultRestartPolicy); without
// its defaulting the pod's own default, Always, which restarts every
// process fault just the same.
func kubeflowPodRestartPolicy(r *kubeflowv1.ReplicaSpec) corev1.RestartPolicy {
	switch r.RestartPolicy {
	case kubeflowv1.RestartPolicyExitCode:
		return corev1.RestartPolicyNever
	case "":
		return corev1.RestartPolicy(kubeflowv1.PyTorchJobDefaultRestartPolicy)
	}
	return corev1.RestartPolicy(r.RestartPolicy)
}

func replicaSpecsPath() *field.Path { return field.NewPath("spec", "pytorchReplicaSpecs") }

// operatorKind is a v1 training operator's PyTorchJob (kubeflow's, KubeDL's):
// replica templates under spec.pytorchReplicaSpecs, rules that need no
// runtime, and the operators' job-name labels on every pod.
func operatorKind[T any](of schema.GroupVersionKind, short string, wrap func(*T) (Job, error), rules func(*T) Result,
	find func(*corev1.Pod) (PodOwner, bool)) *Adapter {
	return &Adapter{GVK: of, Name: short, Decode: Decoder(of, wrap), Validate: func(job Job, _ RuleEnv) Result { return rules(objectOf[T](job)) },
		JobNameLabels: operatorJobNameLabels(), JobOfPod: find, JobLabels: operatorLabels(), PodOwnerChain: []schema.GroupVersionKind{of}}
}

// operatorSchema says where a v1 operator's job keeps what a Job reads.
// It is a zero-size type, so operatorJob stays one pointer and making a
// Job of it allocates nothing on the webhook's path.
type operatorSchema[T any] interface {
	meta(obj *T) *metav1.ObjectMeta
	templates(obj *T) []Template
	elastic(obj *T) Elastic
}

// operatorJob is a decoded job of a v1 operator (kubeflow's, KubeDL's).
type operatorJob[T any, S operatorSchema[T]] struct{ obj *T }

func (j operatorJob[T, S]) Object() any              { return j.obj }
func (j operatorJob[T, S]) Meta() *metav1.ObjectMeta { var s S; return s.meta(j.obj) }
func (j operatorJob[T, S]) Templates() []Template    { var s S; return s.templates(j.obj) }
func (j operatorJob[T, S]) Elastic() Elastic         { var s S; return s.elastic(j.obj) }

// operatorJobNameLabels are the labels the v1 training operators put on
// each pod with the job's name: the current one, then the legacy one.
func operatorJobNameLabels() []JobNameLabel {
	return []JobNameLabel{
		NameLabel(contract.EnvKubeflowJobName, kubeflowv1.LabelJobName),
		NameLabel(contract.EnvOperatorJobName, kubeflowv1.LabelLegacyJobName),
	}
}

// operatorLabels are the labels the v1 operators' pods are found by.
func operatorLabels() []string {
	return []string{kubeflowv1.LabelJobName, kubeflowv1.LabelLegacyJobName, kubeflowv1.LabelGroupName}
}

// kubeflowJobOfPod names the PyTorchJob of a pod without a controller
// owner by the operator's labels; a legacy job-name label belongs to
// kubeflow unless group-name says KubeDL.
func kubeflowJobOfPod(pod *corev1.Pod) (PodOwner, bool) {
	if metav1.GetControllerOf(pod) != nil {
		return PodOwner{}, false
	}
	name := pod.Labels[kubeflowv1.LabelJobName]
	if name == "" && pod.Labels[kubeflowv1.LabelGroupName] != kubedlv1alpha1.GroupVersion.Group {
		name = pod.Labels[kubeflowv1.LabelLegacyJobName]
	}
	if name == "" {
		return PodOwner{}, false
	}
	return PodOwner{APIVersion: kubeflowv1.GroupVersion.String(), Kind: kubeflowv1.Kind, Name: name}, true
}

// validReplicaKeys refuses replica types that cannot name a replica: the
// key is part of every patch path under the map, and the operator writes
// it, lowercased, into its pods' training.kubeflow.org/replica-type label.
// An empty key made the patch path /spec/pytorchReplicaSpecs//template/...,
// which the API server refused with an error naming neither the field nor
// the fix (found by FuzzInjectObject).
func validReplicaKeys[R any](specs map[string]*R, path *field.Path) error {
	var errs field.ErrorList
	for _, rt := range slices.Sorted(maps.Keys(specs)) {
		switch {
		case rt == "":
			errs = append(errs, field.Invalid(path.Key(rt), rt, "the replica type is empty; name it Master or Worker"))
		case len(validation.IsValidLabelValue(strings.ToLower(rt))) > 0:
			errs = append(errs, field.Invalid(path.Key(rt), rt, "the replica type must be usable as a label value "+
				"(at most 63 letters, digits, '-', '_' or '.'); name it Master or Worker"))
		}
	}
	return errs.ToAggregate()
}

// Elastic: kubeflow scales the Worker replicas whenever an elastic policy
// is set; processes per node come from spec.nprocPerNode, or the
// deprecated elasticPolicy.nProcPerNode.
func (kubeflowSchema) elastic(obj *kubeflowv1.PyTorchJob) Elastic {
	spec := &obj.Spec
	e := Elastic{Enabled: spec.ElasticPolicy != nil, Path: field.NewPath("spec", "elasticPolicy")}
	if w := spec.PyTorchReplicaSpecs[kubeflowv1.ReplicaWorker]; w != nil {
		e.Workers = &w.Template.Spec
	}
	switch {
	case spec.NprocPerNode != nil:
		e.NprocPerNode, _ = ParseNproc(*spec.NprocPerNode)
		e.NprocPath = "spec.nprocPerNode"
	case spec.ElasticPolicy != nil && spec.ElasticPolicy.NProcPerNode != nil:
		e.NprocPerNode = max(int64(*spec.ElasticPolicy.NProcPerNode), 0)
		e.NprocPath = "spec.elasticPolicy.nProcPerNode"
	}
	return e
}

// ParseNproc parses an integer nprocPerNode the way the training operator
// does; ok is false for keywords (auto, cpu, gpu) and non-positive values.
func ParseNproc(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}
