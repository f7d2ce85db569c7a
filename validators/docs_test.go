package validators

import (
	"github.com/trainguard/trainguard/internal/testing/builders"

	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/kubedl/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// docs/validation-rules.md is generated from the rules below by running
// each example through the validator, so the messages in it are exactly
// what users see. Regenerate with: go test ./validators/ -run Golden -update
var update = flag.Bool("update", false, "rewrite docs/validation-rules.md")

const docsFile = "../docs/validation-rules.md"

// docRule is one documented rule: an example object that breaks it, and
// the field path of the error (or warning) it produces.
type docRule struct {
	section string
	rule    string
	path    string
	warning bool
	obj     Object
}

func withNs(obj Object, ann map[string]string) Object { obj.NamespaceAnnotations = ann; return obj }

func docRules() []docRule {
	const kf, el, dl, an, cf = "kubeflow.org/v1 PyTorchJob", "kubeflow.org/v1 PyTorchJob: elastic policy", "training.kubedl.io/v1alpha1 PyTorchJob", "Annotations and labels", "Cross-field checks (effective policy)"
	const bj = "batch/v1 Job (a Job no controller owns)"
	bjob := func(f func(*batchv1.Job)) Object {
		return object(builders.MakeBatchJob("ml", "ranks").WithAnnotation(contract.AnnotationCheckpointClaim, "ckpt").With(f))
	}
	torchrun := func(j *batchv1.Job) {
		j.Spec.Template.Spec.Containers[0].Command = []string{"torchrun", "--nnodes=4", "train.py"}
	}
	ep := func(f func(*kubeflowv1.ElasticPolicy)) Object { return object(job().WithElastic(1, 1).WithPolicy(f)) }
	// The KubeDL examples have a checkpoint claim, so the no-checkpoint warning stays out of their rows.
	dlJob := func() *builders.KubeDLJobWrapper {
		return kubedlJob().WithAnnotation(contract.AnnotationCheckpointClaim, "ckpt")
	}
	dlp := func(f func(*kubedlv1alpha1.ElasticPolicy)) Object { return object(dlJob().WithPolicy(f)) }
	ann := func(k, v string) Object { return object(job().WithAnnotation(k, v)) }
	ports := func(p corev1.ContainerPort) Object {
		return object(job().WithWorkerContainer(func(c *corev1.Container) { c.Ports = []corev1.ContainerPort{p} }))
	}
	return []docRule{
		{kf, "name is a DNS-1035 label", "metadata.name", false, object(job().WithName("1-train"))},
		{kf, "pytorchReplicaSpecs is required", "spec.pytorchReplicaSpecs", false, object(job().WithoutReplica("Master").WithoutReplica("Worker"))},
		{kf, "only Master and Worker replica types", "spec.pytorchReplicaSpecs[Chief]", false, object(job().WithReplica("Chief", func(*kubeflowv1.ReplicaSpec) {}))},
		{kf, "every replica has containers", "spec.pytorchReplicaSpecs[Worker].template.spec.containers", false,
			object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.Template.Spec.Containers = nil }))},
		{kf, "every container has an image", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image", false,
			object(job().WithWorkerContainer(func(c *corev1.Container) { c.Image = "" }))},
		{kf, "a container named pytorch exists", "spec.pytorchReplicaSpecs[Worker].template.spec.containers", false,
			object(job().WithWorkerContainer(func(c *corev1.Container) { c.Name = "main" }))},
		{kf, "Master replicas is set and is 1 (kubeflow refuses it unset too)", "spec.pytorchReplicaSpecs[Master].replicas", false, object(job().WithMaster(nil))},
		{kf, "non-Master replicas ≥ 1 (unset means 1)", "spec.pytorchReplicaSpecs[Worker].replicas", false, object(job().WithWorker(0))},
		{kf, "restartPolicy is Always, OnFailure, Never or ExitCode", "spec.pytorchReplicaSpecs[Worker].restartPolicy", false,
			object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = "Sometimes" }))},
		{kf, "runPolicy.managedBy is the training operator or MultiKueue", "spec.runPolicy.managedBy", false, object(job().WithManagedBy("example.com/mine"))},
		{kf, "runPolicy.managedBy is immutable (UPDATE)", "spec.runPolicy.managedBy", false, updatedFrom(object(job().WithManagedBy("kueue.x-k8s.io/multikueue")), job())},
		{kf, "nprocPerNode is auto, cpu, gpu or a positive integer", "spec.nprocPerNode", false, object(job().WithNproc("0"))},

		{el, "elasticPolicy requires a Worker", "spec.pytorchReplicaSpecs[Worker]", false, object(job().WithElastic(1, 1).WithoutReplica("Worker").WithMaster(builders.Ptr[int32](1)))},
		{el, "nProcPerNode is deprecated", "spec.elasticPolicy.nProcPerNode", true, ep(func(p *kubeflowv1.ElasticPolicy) { p.NProcPerNode = builders.Ptr[int32](2) })},
		{el, "nProcPerNode is forbidden with spec.nprocPerNode", "spec.elasticPolicy.nProcPerNode", false,
			object(job().WithElastic(1, 1).WithNproc("2").WithPolicy(func(p *kubeflowv1.ElasticPolicy) { p.NProcPerNode = builders.Ptr[int32](2) }))},
		{el, "nProcPerNode ≥ 1", "spec.elasticPolicy.nProcPerNode", false, ep(func(p *kubeflowv1.ElasticPolicy) { p.NProcPerNode = builders.Ptr[int32](0) })},
		{el, "minReplicas ≥ 1", "spec.elasticPolicy.minReplicas", false, object(job().WithElastic(0, 1))},
		{el, "maxReplicas ≥ 1", "spec.elasticPolicy.maxReplicas", false, object(job().WithElastic(1, 0))},
		{el, "maxReplicas ≥ minReplicas", "spec.elasticPolicy.maxReplicas", false, object(job().WithElastic(3, 2).WithWorker(2))},
		{el, "Worker replicas within [minReplicas, maxReplicas] (an unset bound takes the other; neither means the Worker count)", "spec.pytorchReplicaSpecs[Worker].replicas", false,
			object(job().WithElastic(2, 4).WithWorker(5))},
		{el, "rdzvBackend is c10d, etcd or etcd-v2", "spec.elasticPolicy.rdzvBackend", false, ep(func(p *kubeflowv1.ElasticPolicy) { p.RDZVBackend = builders.Ptr("zookeeper") })},
		{el, "etcd and etcd-v2 need rdzvHost", "spec.elasticPolicy.rdzvHost", false, ep(func(p *kubeflowv1.ElasticPolicy) { p.RDZVBackend = builders.Ptr("etcd") })},
		{el, "rdzvPort is 1–65535", "spec.elasticPolicy.rdzvPort", false, ep(func(p *kubeflowv1.ElasticPolicy) { p.RDZVPort = builders.Ptr[int32](0) })},
		{el, "maxRestarts ≥ 0", "spec.elasticPolicy.maxRestarts", false, ep(func(p *kubeflowv1.ElasticPolicy) { p.MaxRestarts = builders.Ptr[int32](-1) })},
		{el, "rdzvConf keys are non-empty", "spec.elasticPolicy.rdzvConf[0].key", false, ep(func(p *kubeflowv1.ElasticPolicy) { p.RDZVConf = []kubeflowv1.RDZVConf{{Value: "1"}} })},
		{el, "rdzvConf keys are unique", "spec.elasticPolicy.rdzvConf[1].key", false,
			ep(func(p *kubeflowv1.ElasticPolicy) {
				p.RDZVConf = []kubeflowv1.RDZVConf{{Key: "timeout"}, {Key: "timeout"}}
			})},
		{el, "standalone only on a single node", "spec.elasticPolicy.standalone", false,
			object(job().WithElastic(2, 2).WithWorker(2).WithPolicy(func(p *kubeflowv1.ElasticPolicy) { p.Standalone = builders.Ptr(true) }))},
		{el, "metrics need minReplicas < maxReplicas", "spec.elasticPolicy.metrics", true,
			object(job().WithElastic(2, 2).WithWorker(2).WithPolicy(func(p *kubeflowv1.ElasticPolicy) { p.Metrics = []kubeflowv1.MetricRaw{{"type": "Resource"}} }))},

		{dl, "kubedl.io/enable-elastic-training is true or false", "metadata.annotations[kubedl.io/enable-elastic-training]", false,
			object(dlJob().WithAnnotation(kubedlv1alpha1.AnnotationEnableElastic, "yes"))},
		{dl, "enableElastic requires elasticPolicy", "spec.elasticPolicy", false, object(dlJob().With(func(j *kubedlv1alpha1.PyTorchJob) { j.Spec.ElasticPolicy = nil }))},
		{dl, "elasticPolicy without enableElastic is ignored", "spec.elasticPolicy", true, object(dlJob().With(func(j *kubedlv1alpha1.PyTorchJob) { j.Spec.EnableElastic = false }))},
		{dl, "elastic scaling needs both bounds", "spec.elasticPolicy", true, dlp(func(p *kubedlv1alpha1.ElasticPolicy) { p.MaxReplicas = nil })},
		{dl, "rdzvEndpoint is required for etcd", "spec.elasticPolicy.rdzvEndpoint", false, dlp(func(p *kubedlv1alpha1.ElasticPolicy) { p.RDZVEndpoint = "" })},
		{dl, "rdzvEndpoint is host:port", "spec.elasticPolicy.rdzvEndpoint", false, dlp(func(p *kubedlv1alpha1.ElasticPolicy) { p.RDZVEndpoint = "etcd-service" })},
		{dl, "minReplicas ≥ 1", "spec.elasticPolicy.minReplicas", false, dlp(func(p *kubedlv1alpha1.ElasticPolicy) { p.MinReplicas = builders.Ptr[int32](0) })},
		{dl, "maxReplicas ≥ minReplicas", "spec.elasticPolicy.maxReplicas", false, dlp(func(p *kubedlv1alpha1.ElasticPolicy) { p.MinReplicas = builders.Ptr[int32](4) })},
		{dl, "Worker replicas within [minReplicas, maxReplicas] (when both are set)", "spec.pytorchReplicaSpecs[Worker].replicas", false,
			object(dlJob().With(func(j *kubedlv1alpha1.PyTorchJob) {
				j.Spec.PyTorchReplicaSpecs["Worker"].Replicas = builders.Ptr[int32](4)
			}))},
		{dl, "maxRestarts ≥ 0", "spec.elasticPolicy.maxRestarts", false, dlp(func(p *kubedlv1alpha1.ElasticPolicy) { p.MaxRestarts = builders.Ptr[int32](-1) })},
		{dl, "nProcPerNode ≥ 1", "spec.elasticPolicy.nProcPerNode", false, dlp(func(p *kubedlv1alpha1.ElasticPolicy) { p.NProcPerNode = builders.Ptr[int32](0) })},

		{bj, "podFailurePolicy is set: without one a drained, preempted or rescheduled pod counts against backoffLimit", "spec.podFailurePolicy", true,
			bjob(func(j *batchv1.Job) { j.Spec.PodFailurePolicy = nil })},
		{bj, "the first podFailurePolicy rule on the DisruptionTarget condition is Ignore", "spec.podFailurePolicy.rules[0].action", true,
			bjob(func(j *batchv1.Job) { j.Spec.PodFailurePolicy.Rules[0].Action = batchv1.PodFailurePolicyActionFailJob })},
		{bj, "torchrun over more than one completion needs completionMode: Indexed", "spec.completionMode", true,
			bjob(func(j *batchv1.Job) {
				torchrun(j)
				j.Spec.Completions = builders.Ptr[int32](4)
				j.Spec.CompletionMode = nil
			})},
		{bj, "backoffLimit ≥ 1 (a rescheduled pod's failure must not fail the Job)", "spec.backoffLimit", true,
			bjob(func(j *batchv1.Job) { j.Spec.BackoffLimit = builders.Ptr[int32](0) })},
		{bj, "backoffLimitPerIndex ≥ 1", "spec.backoffLimitPerIndex", true,
			bjob(func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = builders.Ptr[int32](0) })},
		{bj, "the trainguard annotations of the Job and its template follow the annotation rules", "spec.template.metadata.annotations[trainguard.io/gpu-limit]", false,
			bjob(func(j *batchv1.Job) {
				j.Spec.Template.Annotations = map[string]string{contract.AnnotationGPULimit: "65"}
			})},

		{an, "recover-strategy: no empty entry", "metadata.annotations[trainguard.io/recover-strategy]", false, ann(contract.AnnotationRecoverStrategy, "recover,")},
		{an, "recover-strategy: subset of retry, recover, recover-in-place, elastic-training, dump, exit", "metadata.annotations[trainguard.io/recover-strategy]", false, ann(contract.AnnotationRecoverStrategy, "migrate")},
		{an, "recover-strategy: no duplicate entry", "metadata.annotations[trainguard.io/recover-strategy]", false, ann(contract.AnnotationRecoverStrategy, "dump,dump")},
		{an, "MindCluster recover-strategy: same rules", "metadata.annotations[recover-strategy]", false, ann(contract.AnnotationMindClusterRecoverStrategy, "restart")},
		{an, "fault-scheduling annotation: grace, force or off", "metadata.annotations[trainguard.io/fault-scheduling]", false, ann(contract.AnnotationFaultScheduling, "soon")},
		{an, "MindCluster fault-scheduling label: grace, force or off", "metadata.labels[fault-scheduling]", false, object(job().WithLabel(contract.LabelMindClusterFaultScheduling, "soon"))},
		{an, "checkpoint-claim is a DNS-1123 subdomain", "metadata.annotations[trainguard.io/checkpoint-claim]", false, ann(contract.AnnotationCheckpointClaim, "Ckpt_PVC")},
		{an, "checkpoint-path is absolute", "metadata.annotations[trainguard.io/checkpoint-path]", false, ann(contract.AnnotationCheckpointPath, "ckpt")},
		{an, "checkpoint-path is clean", "metadata.annotations[trainguard.io/checkpoint-path]", false, ann(contract.AnnotationCheckpointPath, "/mnt/../ckpt")},
		{an, "checkpoint-path is not /", "metadata.annotations[trainguard.io/checkpoint-path]", false, ann(contract.AnnotationCheckpointPath, "/")},
		{an, "checkpoint-path is not under /proc, /sys, /dev, /var/run/secrets", "metadata.annotations[trainguard.io/checkpoint-path]", false, ann(contract.AnnotationCheckpointPath, "/var/run/secrets/ckpt")},
		{an, "prestop-timeout is a Go duration", "metadata.annotations[trainguard.io/prestop-timeout]", false, ann(contract.AnnotationPreStopTimeout, "90")},
		{an, "prestop-timeout is positive and ≤ 1h", "metadata.annotations[trainguard.io/prestop-timeout]", false, ann(contract.AnnotationPreStopTimeout, "2h")},
		{an, "gpu-limit is an integer 0–64", "metadata.annotations[trainguard.io/gpu-limit]", false, ann(contract.AnnotationGPULimit, "65")},
		{an, "taskd is enabled or disabled", "metadata.annotations[trainguard.io/taskd]", false, ann(contract.AnnotationTaskD, "on")},
		{an, "inject is enabled or disabled", "metadata.annotations[trainguard.io/inject]", false, ann(contract.AnnotationInject, "yes")},
		{an, "max-reschedules is an integer 0–1000", "metadata.annotations[trainguard.io/max-reschedules]", false, ann(contract.AnnotationMaxReschedules, "-1")},
		{an, "require-durable-checkpoints is true or false", "metadata.annotations[trainguard.io/require-durable-checkpoints]", false, ann(contract.AnnotationRequireDurableCheckpoints, "yes")},
		{an, "in-process-recovery is enabled or disabled", "metadata.annotations[trainguard.io/in-process-recovery]", false, ann(contract.AnnotationInProcessRecovery, "on")},
		{an, "no unknown trainguard.io/ annotation or label key (the nearest known key is named)", "metadata.annotations[trainguard.io/gpu-limt]", false, ann("trainguard.io/gpu-limt", "2")},

		{cf, "TaskD on: the TaskD port number is only used as taskd-port", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports[0].containerPort", false,
			ports(corev1.ContainerPort{Name: "metrics", ContainerPort: 9601})},
		{cf, "TaskD on: the port name taskd-port is only used for the TaskD port", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports[0].name", false,
			ports(corev1.ContainerPort{Name: "taskd-port", ContainerPort: 9000})},
		{cf, "integer nprocPerNode ≤ the training container's GPU limit", "spec.nprocPerNode", true,
			object(job().WithNproc("4").WithWorkerContainer(func(c *corev1.Container) { c.Resources = builders.GPULimit(2) }))},
		{cf, "checkpoints go to a volume that outlives the pod (an error with trainguard.io/require-durable-checkpoints=true)", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0]", true, object(job().WithElastic(1, 2))},
		{cf, "in-process-recovery: the training container has a command (the supervisor runs it); not checked under torchrun (elastic)", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].command", false,
			object(job().WithAnnotation(contract.AnnotationInProcessRecovery, contract.InjectEnabled).WithReplica("Master", func(rs *kubeflowv1.ReplicaSpec) {
				rs.Template.Spec.Containers[0].Command = []string{"python3", "train.py"}
			}))},
		{cf, "elastic-training needs an elastic policy", "metadata.annotations[trainguard.io/recover-strategy]", true, ann(contract.AnnotationRecoverStrategy, "recover,elastic-training")},
		{cf, "an extended resource (a GPU) is a whole number, as the API server requires of the pods", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.limits[nvidia.com/gpu]", false,
			object(job().WithWorkerContainer(func(c *corev1.Container) {
				c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0.5")}
			}))},
		{cf, "a pod asks for at most 64 GPUs (no node holds more)", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.limits[nvidia.com/gpu]", true,
			object(job().WithWorkerContainer(func(c *corev1.Container) { c.Resources = builders.GPULimit(10000) }))},
		{cf, "bad namespace annotations are ignored", "namespace annotation", true, withNs(object(job()), map[string]string{contract.AnnotationGPULimit: "lots"})},
	}
}

// docRow runs one rule's example and returns the message it documents.
func docRow(t *testing.T, r docRule) string {
	t.Helper()
	res := validate(t, r.obj)
	var found []string
	if r.warning {
		for _, w := range res.Warnings {
			if strings.HasPrefix(w, r.path) {
				found = append(found, w)
			}
		}
	} else {
		for _, e := range res.Errors {
			if e.Field == r.path {
				found = append(found, e.ErrorBody())
			}
		}
	}
	require.Len(t, found, 1, "rule %q: want exactly one message at %s; errors %v, warnings %v", r.rule, r.path, res.Errors, res.Warnings)
	return found[0]
}

func renderDocs(t *testing.T) string {
	var b strings.Builder
	b.WriteString(docsIntro)
	section := ""
	for _, r := range docRules() {
		if r.section != section {
			section = r.section
			fmt.Fprintf(&b, "\n### %s\n\n| Rule | Field path | Severity | Message (for the example value) |\n|---|---|---|---|\n", section)
		}
		severity := "error"
		if r.warning {
			severity = "warning"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", cell(r.rule), r.path, severity, cell("`"+docRow(t, r)+"`"))
	}
	b.WriteString(docsNotes)
	return b.String()
}

// cell escapes a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func TestGoldenValidationRulesDoc(t *testing.T) {
	got := renderDocs(t)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(docsFile), 0o755))
		require.NoError(t, os.WriteFile(docsFile, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(docsFile)
	require.NoError(t, err, "run: go test ./validators/ -run Golden -update")
	require.Equal(t, string(want), got, "docs/validation-rules.md is stale; run: go test ./validators/ -run Golden -update")
}

const docsIntro = `# Validation rules

<!-- Generated by validators/docs_test.go from the validator itself: every
message below is what the example in that test produces. Do not edit by
hand; run: go test ./validators/ -run Golden -update -->

The validating webhook and ` + "`trainguard validate`" + ` apply the same rules
(package ` + "`validators`" + `). Errors refuse the object; all of them are returned
at once as a ` + "`field.ErrorList`" + ` (the webhook answers 422 Invalid; the CLI
prints ` + "`<Kind>/<namespace>/<name>: <field path>: <message>`" + ` per error and exits 1).
Warnings are admission warnings (the CLI prints them on stderr) and never
refuse anything.

Annotation and label rules apply wherever trainguard reads them: on jobs
(` + "`metadata`" + `), on each replica's pod template
(` + "`spec.pytorchReplicaSpecs[<type>].template.metadata`" + `), on Pods and on
Namespaces; the table shows the job's path. The annotation rules are
package ` + "`contract`" + `'s parsers, the same ones the config file is checked with.
`

const docsNotes = `
### How the rules are applied

- **Training container.** Cross-field checks look at one container per pod
  template: the first whose name is in the config's ` + "`trainingContainer.names`" + `
  (default ` + "`pytorch`, `ascend`" + `, in that order), else the first container.
- **TaskD** is on when the effective policy (config < namespace annotations <
  object annotations, ` + "`trainguard.io/taskd`" + `) says so; its port is the config's
  ` + "`taskd.port`" + ` (default 9601). Only ` + "`{name: taskd-port, containerPort: 9601}`" + ` is allowed.
- **GPU limit** is the training container's limit of the config's
  ` + "`gpu.resourceName`" + ` (default ` + "`nvidia.com/gpu`" + `). Containers without that limit, or
  with 0, are CPU training and get no warning.
- **Checkpoint volume** means a ` + "`trainguard.io/checkpoint-claim`" + ` in the effective
  policy, or a PVC volume named ` + "`trainguard-checkpoint`" + ` in the Worker template.
- **Opted-out objects** (` + "`trainguard.io/inject: disabled`" + `) get no cross-field
  checks: trainguard applies no policy to them. All other rules still apply.
- **Pods** get the cross-field checks only when trainguard injected them (they
  carry ` + "`trainguard.io/injected`" + `); other pods in an opted-in namespace, such
  as a rendezvous etcd or the pods of an opted-out job, are checked for their
  trainguard annotations only.
- **UPDATE** validates the new object but refuses only errors the update
  introduces: an error whose type, field path and bad value were already
  present on the old object is dropped, so an object admitted before a rule
  existed stays editable. Updates of the ` + "`status`" + ` subresource always pass.
- **Decoding.** An object that is not valid JSON of its kind (for example
  ` + "`replicas: two`" + `) is refused as a bad request by the webhook, and is an invalid
  document for the CLI. Field names are case-sensitive, as in the API server.
- **Other kinds** pass unchecked. The CLI also validates the items of a
  ` + "`v1 List`" + `, and treats a document without ` + "`apiVersion`/`kind`" + ` as invalid.
`
