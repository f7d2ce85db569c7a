package jobs

import (
	"github.com/trainguard/trainguard/internal/testing/builders"

	"testing"

	kubedlv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/kubedl/v1alpha1"
)

// kubedlJob is the KubeDL tutorial job the rule table starts from.
func kubedlJob() *builders.KubeDLJobWrapper { return builders.MakeKubeDLJob("elastic-job", "resnet") }

func TestKubeDLJobRules(t *testing.T) {
	policy := func(f func(*kubedlv1alpha1.ElasticPolicy)) fixture { return kubedlJob().WithPolicy(f) }
	runRuleCases(t, []ruleCase{
		{name: "valid tutorial job", obj: kubedlJob()},

		{name: "enable annotation true", obj: kubedlJob().WithAnnotation("kubedl.io/enable-elastic-training", "true")},
		{name: "enable annotation yes", obj: kubedlJob().WithAnnotation("kubedl.io/enable-elastic-training", "yes"),
			errs: []string{"metadata.annotations[kubedl.io/enable-elastic-training]"}},

		{name: "enableElastic without policy", obj: kubedlJob().With(func(j *kubedlv1alpha1.PyTorchJob) { j.Spec.ElasticPolicy = nil }),
			errs: []string{"spec.elasticPolicy"}},
		{name: "not elastic, no policy", obj: kubedlJob().With(func(j *kubedlv1alpha1.PyTorchJob) { j.Spec.EnableElastic, j.Spec.ElasticPolicy = false, nil })},
		{name: "policy without enableElastic is ignored", obj: kubedlJob().With(func(j *kubedlv1alpha1.PyTorchJob) { j.Spec.EnableElastic = false }),
			warn: "spec.elasticPolicy is ignored because spec.enableElastic is not true"},

		{name: "rdzvEndpoint host:port", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.RDZVEndpoint = "10.0.0.1:2379" })},
		{name: "rdzvEndpoint without port", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.RDZVEndpoint = "etcd-service" }),
			errs: []string{"spec.elasticPolicy.rdzvEndpoint"}},
		{name: "rdzvEndpoint port out of range", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.RDZVEndpoint = "etcd-service:70000" }),
			errs: []string{"spec.elasticPolicy.rdzvEndpoint"}},
		{name: "rdzvEndpoint without host", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.RDZVEndpoint = ":2379" }),
			errs: []string{"spec.elasticPolicy.rdzvEndpoint"}},
		{name: "c10d without endpoint", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.RDZVBackend, ep.RDZVEndpoint = "c10d", "" })},
		{name: "etcd without endpoint", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.RDZVEndpoint = "" }),
			errs: []string{"spec.elasticPolicy.rdzvEndpoint"}},

		{name: "minReplicas 0", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.MinReplicas = builders.Ptr[int32](0) }),
			errs: []string{"spec.elasticPolicy.minReplicas"}},
		{name: "maxReplicas below min", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) {
			ep.MinReplicas, ep.MaxReplicas = builders.Ptr[int32](3), builders.Ptr[int32](2)
		}),
			errs: []string{"spec.elasticPolicy.maxReplicas"}},
		{name: "Workers above max", obj: kubedlJob().With(func(j *kubedlv1alpha1.PyTorchJob) {
			j.Spec.PyTorchReplicaSpecs["Worker"].Replicas = builders.Ptr[int32](4)
		}),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "missing bound warns", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.MaxReplicas = nil }),
			warn: "KubeDL scales a job only when both minReplicas and maxReplicas are set"},

		{name: "maxRestarts -1", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.MaxRestarts = builders.Ptr[int32](-1) }),
			errs: []string{"spec.elasticPolicy.maxRestarts"}},
		{name: "nProcPerNode 0", obj: policy(func(ep *kubedlv1alpha1.ElasticPolicy) { ep.NProcPerNode = builders.Ptr[int32](0) }),
			errs: []string{"spec.elasticPolicy.nProcPerNode"}},

		{name: "template annotation", obj: kubedlJob().With(func(j *kubedlv1alpha1.PyTorchJob) {
			j.Spec.PyTorchReplicaSpecs["Worker"].Template.Annotations = map[string]string{"trainguard.io/taskd": "on"}
		}), errs: []string{"spec.pytorchReplicaSpecs[Worker].template.metadata.annotations[trainguard.io/taskd]"}},
	})
}
