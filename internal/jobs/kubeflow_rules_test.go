package jobs

import (
	corev1 "k8s.io/api/core/v1"

	"testing"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

// job is the kubeflow PyTorchJob the rule tables start from.
func job() *builders.KubeflowJobWrapper { return builders.MakeKubeflowJob("ml", "train") }

func TestKubeflowJobRules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "valid job", obj: job()},

		{name: "name is a DNS-1035 label", obj: job().WithName("train-1")},
		{name: "name not a DNS-1035 label", obj: job().WithName("1-Train"), errs: []string{"metadata.name"}},
		{name: "generateName prefix is checked offline", obj: job().WithName("").With(func(j *kubeflowv1.PyTorchJob) { j.GenerateName = "Train." }), errs: []string{"metadata.generateName"}},
		{name: "generateName prefix ok", obj: job().WithName("").With(func(j *kubeflowv1.PyTorchJob) { j.GenerateName = "train-" })},

		{name: "replica specs required", obj: job().WithoutReplica("Master").WithoutReplica("Worker"), errs: []string{"spec.pytorchReplicaSpecs"}},
		{name: "only Master and Worker", obj: job().WithReplica("Chief", func(*kubeflowv1.ReplicaSpec) {}), errs: []string{"spec.pytorchReplicaSpecs[Chief]"}},

		{name: "containers required", obj: job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.Template.Spec.Containers = nil }),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers"}},
		{name: "image required", obj: job().WithWorkerContainer(func(c *corev1.Container) { c.Image = "" }),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image"}},
		{name: "pytorch container required", obj: job().WithWorkerContainer(func(c *corev1.Container) { c.Name = "main" }),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers"}},
		{name: "pytorch container need not be first", obj: job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) {
			rs.Template.Spec.Containers = []corev1.Container{builders.Container("sidecar"), builders.Container("pytorch")}
		})},

		// kubeflow's webhook refuses it ("[Master].replicas must be 1"); so does trainguard.
		{name: "Master replicas unset", obj: job().WithMaster(nil), errs: []string{"spec.pytorchReplicaSpecs[Master].replicas"}},
		{name: "Master replicas 1", obj: job().WithMaster(builders.Ptr[int32](1))},
		{name: "Master replicas 2", obj: job().WithMaster(builders.Ptr[int32](2)), errs: []string{"spec.pytorchReplicaSpecs[Master].replicas"}},
		{name: "Worker replicas 3", obj: job().WithWorker(3)},
		{name: "Worker replicas 0", obj: job().WithWorker(0), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},

		{name: "restartPolicy ExitCode", obj: job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = "ExitCode" })},
		{name: "restartPolicy unknown", obj: job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = "Sometimes" }),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].restartPolicy"}},

		{name: "managedBy MultiKueue", obj: job().WithManagedBy("kueue.x-k8s.io/multikueue")},
		{name: "managedBy training operator", obj: job().WithManagedBy("kubeflow.org/training-operator")},
		{name: "managedBy unknown", obj: job().WithManagedBy("example.com/mine"), errs: []string{"spec.runPolicy.managedBy"}},

		{name: "nprocPerNode auto", obj: job().WithNproc("auto")},
		{name: "nprocPerNode gpu", obj: job().WithNproc("gpu")},
		{name: "nprocPerNode 8", obj: job().WithNproc("8")},
		{name: "nprocPerNode 0", obj: job().WithNproc("0"), errs: []string{"spec.nprocPerNode"}},
		{name: "nprocPerNode word", obj: job().WithNproc("two"), errs: []string{"spec.nprocPerNode"}},
	})
}

func TestKubeflowElasticRules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "valid elastic job", obj: job().WithElastic(1, 3).WithWorker(2).WithCheckpointVolume()},

		{name: "elastic requires a Worker", obj: job().WithElastic(1, 1).WithoutReplica("Worker").WithMaster(builders.Ptr[int32](1)),
			errs: []string{"spec.pytorchReplicaSpecs[Worker]"}},

		{name: "nProcPerNode is deprecated", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = builders.Ptr[int32](2) }),
			warn: "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"},
		{name: "nProcPerNode with nprocPerNode", obj: job().WithElastic(1, 1).WithNproc("2").WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = builders.Ptr[int32](2) }),
			errs: []string{"spec.elasticPolicy.nProcPerNode"}},
		{name: "nProcPerNode 0", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = builders.Ptr[int32](0) }),
			errs: []string{"spec.elasticPolicy.nProcPerNode"}},

		{name: "minReplicas 1", obj: job().WithElastic(1, 1)},
		{name: "minReplicas 0", obj: job().WithElastic(0, 2), errs: []string{"spec.elasticPolicy.minReplicas"}},
		{name: "maxReplicas equal to min", obj: job().WithElastic(2, 2).WithWorker(2)},
		{name: "maxReplicas below min", obj: job().WithElastic(3, 2).WithWorker(2), errs: []string{"spec.elasticPolicy.maxReplicas"}},
		{name: "maxReplicas 0", obj: job().WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxReplicas = builders.Ptr[int32](0) }).WithoutReplica("Master"),
			errs: []string{"spec.elasticPolicy.maxReplicas"}},

		{name: "Workers within range", obj: job().WithElastic(2, 4).WithWorker(4)},
		{name: "Workers below min", obj: job().WithElastic(2, 4).WithWorker(1), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "Workers above max", obj: job().WithElastic(2, 4).WithWorker(5), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "unset Worker replicas default to 1", obj: job().WithElastic(2, 4).WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.Replicas = nil }),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "unset minReplicas defaults to maxReplicas", obj: job().WithoutReplica("Master").WithWorker(2).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxReplicas = builders.Ptr[int32](3) }),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "no bounds default to the Worker count", obj: job().WithoutReplica("Master").WithWorker(3).WithPolicy(func(*kubeflowv1.ElasticPolicy) {})},

		{name: "rdzvBackend c10d", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = builders.Ptr("c10d") })},
		{name: "rdzvBackend unknown", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = builders.Ptr("zookeeper") }),
			errs: []string{"spec.elasticPolicy.rdzvBackend"}},

		{name: "rdzvPort 29400", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = builders.Ptr[int32](29400) })},
		{name: "rdzvPort 0", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = builders.Ptr[int32](0) }),
			errs: []string{"spec.elasticPolicy.rdzvPort"}},
		{name: "rdzvPort 65536", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = builders.Ptr[int32](65536) }),
			errs: []string{"spec.elasticPolicy.rdzvPort"}},

		{name: "etcd with rdzvHost", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVBackend, ep.RDZVHost = builders.Ptr("etcd"), builders.Ptr("etcd-service")
		})},
		{name: "etcd without rdzvHost", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = builders.Ptr("etcd") }),
			errs: []string{"spec.elasticPolicy.rdzvHost"}},
		{name: "etcd-v2 with empty rdzvHost", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVBackend, ep.RDZVHost = builders.Ptr("etcd-v2"), builders.Ptr("")
		}),
			errs: []string{"spec.elasticPolicy.rdzvHost"}},

		{name: "maxRestarts 0", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxRestarts = builders.Ptr[int32](0) })},
		{name: "maxRestarts -1", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxRestarts = builders.Ptr[int32](-1) }),
			errs: []string{"spec.elasticPolicy.maxRestarts"}},

		{name: "rdzvConf distinct keys", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "timeout", Value: "900"}, {Key: "read_timeout", Value: "60"}}
		})},
		{name: "rdzvConf empty key", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "", Value: "900"}}
		}), errs: []string{"spec.elasticPolicy.rdzvConf[0].key"}},
		{name: "rdzvConf duplicate key", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "timeout", Value: "900"}, {Key: "timeout", Value: "60"}}
		}), errs: []string{"spec.elasticPolicy.rdzvConf[1].key"}},

		{name: "standalone on one node", obj: job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = builders.Ptr(true) })},
		{name: "standalone on two nodes", obj: job().WithElastic(2, 2).WithWorker(2).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = builders.Ptr(true) }),
			errs: []string{"spec.elasticPolicy.standalone"}},
		{name: "standalone that could scale out", obj: job().WithElastic(1, 3).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = builders.Ptr(true) }),
			errs: []string{"spec.elasticPolicy.standalone"}},

		{name: "metrics with a range", obj: job().WithElastic(1, 3).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Metrics = []kubeflowv1.MetricRaw{{"type": "Resource"}} }),
			noWarn: "autoscaler"},
		{name: "metrics with min == max", obj: job().WithElastic(2, 2).WithWorker(2).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Metrics = []kubeflowv1.MetricRaw{{"type": "Resource"}} }),
			warn: "spec.elasticPolicy.metrics: minReplicas equals maxReplicas (2), so the autoscaler can do nothing"},
	})
}
