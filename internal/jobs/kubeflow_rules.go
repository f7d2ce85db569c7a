package jobs

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Rules for kubeflow.org/v1 PyTorchJob: everything the training operator's
// own webhook (v1.9) enforces, plus the elastic policy, which nothing
// checks and which otherwise fails inside torchrun hours later.

// defaultContainerName is the container the training operator configures
// (env, ports); a job without it never gets its rendezvous settings.
const defaultContainerName = "pytorch"

// Values kubeflow accepts; funcs rather than package variables so nothing can mutate them.
func replicaTypes() []string { return []string{kubeflowv1.ReplicaMaster, kubeflowv1.ReplicaWorker} }
func restartPolicies() []string {
	return []string{"Always", "OnFailure", "Never", kubeflowv1.RestartPolicyExitCode}
}
func rdzvBackends() []string  { return []string{"c10d", "etcd", "etcd-v2"} }
func nprocKeywords() []string { return []string{"auto", "cpu", "gpu"} }
func jobControllers() []string {
	return []string{kubeflowv1.KubeflowJobsController, kubeflowv1.MultiKueueController}
}

// validateKubeflowJob applies the rules that need no policy.
func validateKubeflowJob(job *kubeflowv1.PyTorchJob) Result {
	metaPath, specPath := field.NewPath("metadata"), field.NewPath("spec")
	var res Result
	res.Errors = append(res.Errors, validateJobName(&job.ObjectMeta, metaPath)...)
	res.Errors = append(res.Errors, contract.ValidateMetadata(&job.ObjectMeta, metaPath)...)
	res.Errors = append(res.Errors, validateNprocPerNode(job.Spec.NprocPerNode, specPath.Child("nprocPerNode"))...)
	res.Errors = append(res.Errors, validateManagedBy(job.Spec.RunPolicy, specPath.Child("runPolicy", "managedBy"))...)
	res.Errors = append(res.Errors, validateReplicaSpecs(job.Spec.PyTorchReplicaSpecs, specPath.Child("pytorchReplicaSpecs"))...)
	warnings, errs := validateKubeflowElastic(&job.Spec, specPath)
	res.Warnings = append(res.Warnings, warnings...)
	res.Errors = append(res.Errors, errs...)
	return res
}

// validateJobName checks that the name is a DNS-1035 label: the operator
// names Services after the job, and Service names must be DNS-1035 labels.
func validateJobName(meta *metav1.ObjectMeta, metaPath *field.Path) field.ErrorList {
	return validateDNS1035Name(meta, metaPath, "the operator names Services after the job")
}

// validateDNS1035Name checks that the name is a DNS-1035 label; why says
// what is named after the object. Offline, a generateName-only object is
// checked by its prefix.
func validateDNS1035Name(meta *metav1.ObjectMeta, metaPath *field.Path, why string) field.ErrorList {
	name, prefix, namePath := meta.Name, false, metaPath.Child("name")
	if name == "" && meta.GenerateName != "" {
		name, prefix, namePath = meta.GenerateName, true, metaPath.Child("generateName")
	}
	if name == "" {
		return field.ErrorList{field.Required(namePath, "must be specified")}
	}
	if msgs := apimachineryvalidation.NameIsDNS1035Label(name, prefix); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(namePath, name,
			"must be a DNS-1035 label ("+why+"): "+strings.Join(msgs, "; "))}
	}
	return nil
}

// validateManagedBy checks spec.runPolicy.managedBy (kubeflow v1.9): a job
// handed to an unknown controller would never run.
func validateManagedBy(rp *kubeflowv1.RunPolicy, fldPath *field.Path) field.ErrorList {
	if rp == nil || rp.ManagedBy == nil || contains(jobControllers(), *rp.ManagedBy) {
		return nil
	}
	return field.ErrorList{field.NotSupported(fldPath, *rp.ManagedBy, jobControllers())}
}

// validateKubeflowUpdate applies the rules that compare the old and new
// job: managedBy is immutable, since two controllers would otherwise both
// believe they own the job's pods.
func validateKubeflowUpdate(job, old *kubeflowv1.PyTorchJob) field.ErrorList {
	return apimachineryvalidation.ValidateImmutableField(managedBy(job.Spec.RunPolicy), managedBy(old.Spec.RunPolicy),
		field.NewPath("spec", "runPolicy", "managedBy"))
}

func managedBy(rp *kubeflowv1.RunPolicy) *string {
	if rp == nil {
		return nil
	}
	return rp.ManagedBy
}

// validateNprocPerNode checks spec.nprocPerNode, which becomes torchrun's
// --nproc-per-node: auto, cpu, gpu or a positive integer.
func validateNprocPerNode(nproc *string, fldPath *field.Path) field.ErrorList {
	if nproc == nil {
		return nil
	}
	if _, ok := ParseNproc(*nproc); ok || contains(nprocKeywords(), *nproc) {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, *nproc, `must be auto, cpu, gpu or a positive integer such as "4"`)}
}

// validateReplicaSpecs applies kubeflow's per-replica rules.
func validateReplicaSpecs(specs map[string]*kubeflowv1.ReplicaSpec, specsPath *field.Path) field.ErrorList {
	if len(specs) == 0 {
		return field.ErrorList{field.Required(specsPath, "must be specified; add a Worker replica spec (and optionally a Master)")}
	}
	var errs field.ErrorList
	for _, rt := range sortedKeys(specs) {
		errs = append(errs, validateReplicaSpec(rt, specs[rt], specsPath.Key(rt))...)
	}
	return errs
}

func validateReplicaSpec(rt string, rs *kubeflowv1.ReplicaSpec, rolePath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !contains(replicaTypes(), rt) {
		errs = append(errs, field.NotSupported(rolePath, rt, replicaTypes()))
	}
	containersPath := rolePath.Child("template", "spec", "containers")
	if rs == nil || len(rs.Template.Spec.Containers) == 0 {
		return append(errs, field.Required(containersPath, "must have at least one container, named pytorch"))
	}
	hasDefault := false
	for i, c := range rs.Template.Spec.Containers {
		if c.Image == "" {
			errs = append(errs, field.Required(containersPath.Index(i).Child("image"), "must be specified"))
		}
		hasDefault = hasDefault || c.Name == defaultContainerName
	}
	if !hasDefault {
		errs = append(errs, field.Required(containersPath,
			"must have a container named pytorch: the training operator configures only that container; rename the training container to pytorch"))
	}
	if rs.Replicas == nil && rt == kubeflowv1.ReplicaMaster {
		// kubeflow's own webhook refuses this too ("must be 1"), although the
		// operator would default it: trainguard answers as kubeflow does.
		errs = append(errs, field.Required(rolePath.Child("replicas"), "must be 1: a job has exactly one Master and kubeflow refuses it unset; set replicas: 1"))
	}
	if rs.Replicas != nil {
		switch {
		case rt == kubeflowv1.ReplicaMaster && *rs.Replicas != 1:
			errs = append(errs, field.Invalid(rolePath.Child("replicas"), *rs.Replicas, "must be 1: a job has exactly one Master; add Workers instead"))
		case rt != kubeflowv1.ReplicaMaster && *rs.Replicas < 1:
			errs = append(errs, field.Invalid(rolePath.Child("replicas"), *rs.Replicas, "must be at least 1; remove this replica spec if it is not needed"))
		}
	}
	if rs.RestartPolicy != "" && !contains(restartPolicies(), rs.RestartPolicy) {
		errs = append(errs, field.NotSupported(rolePath.Child("restartPolicy"), rs.RestartPolicy, restartPolicies()))
	}
	return append(errs, contract.ValidateMetadata(&rs.Template.ObjectMeta, rolePath.Child("template", "metadata"))...)
}

// validateKubeflowElastic checks spec.elasticPolicy against itself and the replica specs.
func validateKubeflowElastic(spec *kubeflowv1.PyTorchJobSpec, specPath *field.Path) ([]string, field.ErrorList) {
	ep := spec.ElasticPolicy
	if ep == nil {
		return nil, nil
	}
	epPath := specPath.Child("elasticPolicy")
	specsPath := specPath.Child("pytorchReplicaSpecs")
	var warnings []string
	var errs field.ErrorList

	if ep.NProcPerNode != nil {
		warnings = append(warnings, fmt.Sprintf("%s is deprecated, use %s instead", epPath.Child("nProcPerNode"), specPath.Child("nprocPerNode")))
		if spec.NprocPerNode != nil {
			errs = append(errs, field.Forbidden(epPath.Child("nProcPerNode"),
				fmt.Sprintf("must not be used with %s; remove %s", specPath.Child("nprocPerNode"), epPath.Child("nProcPerNode"))))
		}
	}
	errs = append(errs, validateNProcPerNode(ep.NProcPerNode, epPath)...)

	worker, hasWorker := spec.PyTorchReplicaSpecs[kubeflowv1.ReplicaWorker]
	if !hasWorker {
		errs = append(errs, field.Required(specsPath.Key(kubeflowv1.ReplicaWorker),
			"must be specified when spec.elasticPolicy is set: elastic training scales the Worker replicas"))
	}
	errs = append(errs, validateMinMax(ep.MinReplicas, ep.MaxReplicas, epPath)...)
	errs = append(errs, validateRendezvous(ep, epPath)...)
	errs = append(errs, validateMaxRestarts(ep.MaxRestarts, epPath)...)

	workers := replicasOf(worker)
	minR, maxR := effectiveRange(ep, workers)
	if hasWorker {
		errs = append(errs, validateWorkersInRange(workers, minR, maxR, specsPath.Key(kubeflowv1.ReplicaWorker).Child("replicas"), epPath)...)
	}
	if ep.Standalone != nil && *ep.Standalone {
		nodes := workers
		if maxR > nodes {
			nodes = maxR
		}
		if master, ok := spec.PyTorchReplicaSpecs[kubeflowv1.ReplicaMaster]; ok {
			nodes += replicasOf(master)
		}
		if nodes > 1 {
			errs = append(errs, field.Invalid(epPath.Child("standalone"), true,
				fmt.Sprintf("must not be true for a job with up to %d nodes: standalone rendezvous is single-node; remove standalone or run a single replica", nodes)))
		}
	}
	if len(ep.Metrics) > 0 && minR == maxR {
		warnings = append(warnings, fmt.Sprintf("%s: minReplicas equals maxReplicas (%d), so the autoscaler can do nothing; widen the range or remove metrics",
			epPath.Child("metrics"), minR))
	}
	return warnings, errs
}

// validateRendezvous checks the rendezvous backend, host, port and config.
func validateRendezvous(ep *kubeflowv1.ElasticPolicy, epPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ep.RDZVBackend != nil {
		backend := *ep.RDZVBackend
		if !contains(rdzvBackends(), backend) {
			errs = append(errs, field.NotSupported(epPath.Child("rdzvBackend"), backend, rdzvBackends()))
		}
		// The operator defaults the host to the first worker, where c10d
		// runs its store; an etcd backend needs the etcd server instead.
		if isEtcd(backend) && (ep.RDZVHost == nil || *ep.RDZVHost == "") {
			errs = append(errs, field.Required(epPath.Child("rdzvHost"),
				fmt.Sprintf("must be specified for the %s backend; set it to the etcd service's host name, e.g. etcd-service", backend)))
		}
	}
	if ep.RDZVPort != nil && (*ep.RDZVPort < 1 || *ep.RDZVPort > 65535) {
		errs = append(errs, field.Invalid(epPath.Child("rdzvPort"), *ep.RDZVPort, "must be between 1 and 65535"))
	}
	seen := map[string]bool{}
	for i, kv := range ep.RDZVConf {
		keyPath := epPath.Child("rdzvConf").Index(i).Child("key")
		switch {
		case kv.Key == "":
			errs = append(errs, field.Required(keyPath, "must be specified"))
		case seen[kv.Key]:
			errs = append(errs, field.Duplicate(keyPath, kv.Key))
		}
		seen[kv.Key] = true
	}
	return errs
}

// effectiveRange is the [min, max] the operator uses, after its defaulting:
// an unset bound takes the other one, and with neither, both are the
// Worker replica count.
func effectiveRange(ep *kubeflowv1.ElasticPolicy, workers int32) (int32, int32) {
	switch {
	case ep.MinReplicas != nil && ep.MaxReplicas != nil:
		return *ep.MinReplicas, *ep.MaxReplicas
	case ep.MinReplicas != nil:
		return *ep.MinReplicas, *ep.MinReplicas
	case ep.MaxReplicas != nil:
		return *ep.MaxReplicas, *ep.MaxReplicas
	}
	return workers, workers
}

// replicasOf is a replica spec's count, defaulted to 1 as the operator does.
func replicasOf(rs *kubeflowv1.ReplicaSpec) int32 {
	if rs == nil {
		return 1
	}
	return deref(rs.Replicas, 1)
}

// sortedKeys returns a map's keys in order, so errors are deterministic.
func sortedKeys[T any](m map[string]T) []string { return slices.Sorted(maps.Keys(m)) }

func isEtcd(backend string) bool { return backend == "etcd" || backend == "etcd-v2" }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
