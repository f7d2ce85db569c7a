package builders

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
)

// The tests' model of kubeflow's training operator (v1.9) making a
// PyTorchJob's pods: written from its source (pkg/core SetRestartPolicy,
// pkg/controller.v1/pytorch's env), apart from trainguard's own reading of
// it (jobs.KubeflowPyTorchJob), so a test comparing the two can fail.

// KubeflowOperatorRestartPolicy is the restartPolicy the operator gives a
// replica's pods: ExitCode becomes Never; unset is its default, OnFailure.
func KubeflowOperatorRestartPolicy(replicaRestartPolicy string) corev1.RestartPolicy {
	switch replicaRestartPolicy {
	case "ExitCode":
		return corev1.RestartPolicyNever
	case "":
		return corev1.RestartPolicyOnFailure
	}
	return corev1.RestartPolicy(replicaRestartPolicy)
}

// KubeflowOperatorPods are job's pods, the Master's and then the Workers',
// built from from's templates as the operator builds them (from is job
// itself, or another job whose templates stand in for it).
func KubeflowOperatorPods(job, from *kubeflowv1.PyTorchJob) []*corev1.Pod {
	var pods []*corev1.Pod
	for _, rt := range []string{kubeflowv1.ReplicaMaster, kubeflowv1.ReplicaWorker} {
		rs := from.Spec.PyTorchReplicaSpecs[rt]
		if rs == nil {
			continue
		}
		replicas := 1
		if rs.Replicas != nil {
			replicas = int(*rs.Replicas)
		}
		for i := range replicas {
			pods = append(pods, KubeflowOperatorPod(job, &rs.Template, KubeflowOperatorRestartPolicy(rs.RestartPolicy), rt, i, len(pods)))
		}
	}
	world := strconv.Itoa(len(pods))
	for _, p := range pods {
		setTrainingEnv(p, "WORLD_SIZE", world)
	}
	return pods
}

// KubeflowOperatorPod is the pod the operator makes for replica idx of
// type rt from tmpl: the template's metadata and spec, its labels, the
// replica's restartPolicy, the job as controller, the rendezvous env.
func KubeflowOperatorPod(job *kubeflowv1.PyTorchJob, tmpl *corev1.PodTemplateSpec, restart corev1.RestartPolicy, rt string, idx, rank int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	p.Namespace, p.Name = job.Namespace, fmt.Sprintf("%s-%s-%d", job.Name, strings.ToLower(rt), idx)
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[kubeflowv1.LabelJobName] = job.Name
	p.Labels["training.kubeflow.org/operator-name"] = "pytorchjob-controller"
	p.Labels["training.kubeflow.org/replica-type"] = strings.ToLower(rt)
	p.Labels["training.kubeflow.org/replica-index"] = strconv.Itoa(idx)
	if rt == kubeflowv1.ReplicaMaster {
		p.Labels["training.kubeflow.org/job-role"] = "master"
	}
	p.Spec.RestartPolicy = restart
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job.Name, UID: job.UID,
		Controller: Ptr(true), BlockOwnerDeletion: Ptr(true)}}
	setTrainingEnv(p, "MASTER_ADDR", job.Name+"-master-0")
	setTrainingEnv(p, "MASTER_PORT", "23456")
	setTrainingEnv(p, "RANK", strconv.Itoa(rank))
	setTrainingEnv(p, "PYTHONUNBUFFERED", "1")
	return p
}

// setTrainingEnv adds an env var to the pod's pytorch container, as the
// operator does.
func setTrainingEnv(p *corev1.Pod, name, value string) {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == "pytorch" {
			p.Spec.Containers[i].Env = append(p.Spec.Containers[i].Env, corev1.EnvVar{Name: name, Value: value})
		}
	}
}
