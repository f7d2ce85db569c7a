package jobs

import (
	"fmt"
	"net"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/kubedl/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Rules for KubeDL's training.kubedl.io/v1alpha1 PyTorchJob. KubeDL passes
// its elastic policy to torchrun unchecked (see seeds/kubedl-torch-elastic.md).

const kubedlWorker = "Worker"

// validateKubeDLJob applies the rules that need no policy.
func validateKubeDLJob(job *kubedlv1alpha1.PyTorchJob) Result {
	metaPath, specPath := field.NewPath("metadata"), field.NewPath("spec")
	specsPath := specPath.Child("pytorchReplicaSpecs")
	var res Result
	res.Errors = append(res.Errors, contract.ValidateMetadata(&job.ObjectMeta, metaPath)...)
	res.Errors = append(res.Errors, validateEnableElasticAnnotation(job.Annotations, metaPath.Child("annotations"))...)
	for _, rt := range sortedKeys(job.Spec.PyTorchReplicaSpecs) {
		if rs := job.Spec.PyTorchReplicaSpecs[rt]; rs != nil {
			res.Errors = append(res.Errors, contract.ValidateMetadata(&rs.Template.ObjectMeta, specsPath.Key(rt).Child("template", "metadata"))...)
		}
	}
	warnings, errs := validateKubeDLElastic(&job.Spec, specPath)
	res.Warnings = append(res.Warnings, warnings...)
	res.Errors = append(res.Errors, errs...)
	return res
}

// validateEnableElasticAnnotation checks KubeDL's elastic switch, which
// KubeDL compares with "true": any other spelling silently means false.
func validateEnableElasticAnnotation(annotations map[string]string, annPath *field.Path) field.ErrorList {
	v, ok := annotations[kubedlv1alpha1.AnnotationEnableElastic]
	if !ok || v == "true" || v == "false" {
		return nil
	}
	return field.ErrorList{field.Invalid(annPath.Key(kubedlv1alpha1.AnnotationEnableElastic), v, `must be "true" or "false"`)}
}

// validateKubeDLElastic checks spec.enableElastic and spec.elasticPolicy.
func validateKubeDLElastic(spec *kubedlv1alpha1.PyTorchJobSpec, specPath *field.Path) ([]string, field.ErrorList) {
	epPath := specPath.Child("elasticPolicy")
	ep := spec.ElasticPolicy
	if ep == nil {
		if spec.EnableElastic {
			return nil, field.ErrorList{field.Required(epPath, "must be specified when spec.enableElastic is true; add minReplicas, maxReplicas and the rendezvous settings")}
		}
		return nil, nil
	}
	var warnings []string
	if !spec.EnableElastic {
		warnings = append(warnings, fmt.Sprintf("%s is ignored because %s is not true; set it to true to train elastically", epPath, specPath.Child("enableElastic")))
	} else if ep.MinReplicas == nil || ep.MaxReplicas == nil {
		warnings = append(warnings, fmt.Sprintf("%s: KubeDL scales a job only when both minReplicas and maxReplicas are set", epPath))
	}
	var errs field.ErrorList
	errs = append(errs, validateRDZVEndpoint(ep, epPath)...)
	errs = append(errs, validateMinMax(ep.MinReplicas, ep.MaxReplicas, epPath)...)
	errs = append(errs, validateMaxRestarts(ep.MaxRestarts, epPath)...)
	errs = append(errs, validateNProcPerNode(ep.NProcPerNode, epPath)...)
	if worker, ok := spec.PyTorchReplicaSpecs[kubedlWorker]; ok && ep.MinReplicas != nil && ep.MaxReplicas != nil {
		replicas := int32(1)
		if worker != nil {
			replicas = deref(worker.Replicas, 1)
		}
		errs = append(errs, validateWorkersInRange(replicas, *ep.MinReplicas, *ep.MaxReplicas,
			specPath.Child("pytorchReplicaSpecs").Key(kubedlWorker).Child("replicas"), epPath)...)
	}
	return warnings, errs
}

// validateRDZVEndpoint checks rdzvEndpoint is host:port, and present for etcd.
func validateRDZVEndpoint(ep *kubedlv1alpha1.ElasticPolicy, epPath *field.Path) field.ErrorList {
	endpointPath := epPath.Child("rdzvEndpoint")
	if ep.RDZVEndpoint == "" {
		if isEtcd(ep.RDZVBackend) {
			return field.ErrorList{field.Required(endpointPath,
				fmt.Sprintf("must be specified for the %s backend, as host:port of the etcd service, e.g. etcd-service:2379", ep.RDZVBackend))}
		}
		return nil
	}
	if !isHostPort(ep.RDZVEndpoint) {
		return field.ErrorList{field.Invalid(endpointPath, ep.RDZVEndpoint, "must be host:port with a port between 1 and 65535, e.g. etcd-service:2379")}
	}
	return nil
}

// isHostPort reports whether s is a non-empty host and a port in 1–65535.
func isHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}
