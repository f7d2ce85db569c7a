package validators

import (
	"github.com/trainguard/trainguard/internal/testing/builders"

	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
)

// ruleCase is one row of a rule table: the object, the exact field paths of
// the errors it must produce (none for a valid object), and optionally a
// warning that must (or must not) be returned.
type ruleCase struct {
	name   string
	obj    Object
	errs   []string
	warn   string
	noWarn string
}

func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := validate(t, tc.obj)
			want := tc.errs
			if want == nil {
				want = []string{}
			}
			assert.Equal(t, want, paths(res.Errors), "errors: %v", res.Errors)
			joined := strings.Join(res.Warnings, "\n")
			if tc.warn != "" {
				assert.Contains(t, joined, tc.warn)
			}
			if tc.noWarn != "" {
				assert.NotContains(t, joined, tc.noWarn)
			}
		})
	}
}

func TestKubeflowJobRules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "valid job", obj: object(job())},

		{name: "name is a DNS-1035 label", obj: object(job().WithName("train-1"))},
		{name: "name not a DNS-1035 label", obj: object(job().WithName("1-Train")), errs: []string{"metadata.name"}},
		{name: "generateName prefix is checked offline", obj: object(job().WithName("").With(func(j *kubeflowv1.PyTorchJob) { j.GenerateName = "Train." })), errs: []string{"metadata.generateName"}},
		{name: "generateName prefix ok", obj: object(job().WithName("").With(func(j *kubeflowv1.PyTorchJob) { j.GenerateName = "train-" }))},

		{name: "replica specs required", obj: object(job().WithoutReplica("Master").WithoutReplica("Worker")), errs: []string{"spec.pytorchReplicaSpecs"}},
		{name: "only Master and Worker", obj: object(job().WithReplica("Chief", func(*kubeflowv1.ReplicaSpec) {})), errs: []string{"spec.pytorchReplicaSpecs[Chief]"}},

		{name: "containers required", obj: object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.Template.Spec.Containers = nil })),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers"}},
		{name: "image required", obj: object(job().WithWorkerContainer(func(c *corev1.Container) { c.Image = "" })),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image"}},
		{name: "pytorch container required", obj: object(job().WithWorkerContainer(func(c *corev1.Container) { c.Name = "main" })),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers"}},
		{name: "pytorch container need not be first", obj: object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) {
			rs.Template.Spec.Containers = []corev1.Container{builders.Container("sidecar"), builders.Container("pytorch")}
		}))},

		// kubeflow's webhook refuses it ("[Master].replicas must be 1"); so does trainguard.
		{name: "Master replicas unset", obj: object(job().WithMaster(nil)), errs: []string{"spec.pytorchReplicaSpecs[Master].replicas"}},
		{name: "Master replicas 1", obj: object(job().WithMaster(builders.Ptr[int32](1)))},
		{name: "Master replicas 2", obj: object(job().WithMaster(builders.Ptr[int32](2))), errs: []string{"spec.pytorchReplicaSpecs[Master].replicas"}},
		{name: "Worker replicas 3", obj: object(job().WithWorker(3))},
		{name: "Worker replicas 0", obj: object(job().WithWorker(0)), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},

		{name: "restartPolicy ExitCode", obj: object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = "ExitCode" }))},
		{name: "restartPolicy unknown", obj: object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = "Sometimes" })),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].restartPolicy"}},

		{name: "managedBy MultiKueue", obj: object(job().WithManagedBy("kueue.x-k8s.io/multikueue"))},
		{name: "managedBy training operator", obj: object(job().WithManagedBy("kubeflow.org/training-operator"))},
		{name: "managedBy unknown", obj: object(job().WithManagedBy("example.com/mine")), errs: []string{"spec.runPolicy.managedBy"}},
		{name: "managedBy unchanged on update", obj: updatedFrom(object(job().WithManagedBy("kueue.x-k8s.io/multikueue").WithWorker(2)), job().WithManagedBy("kueue.x-k8s.io/multikueue"))},
		{name: "managedBy changed on update", obj: updatedFrom(object(job().WithManagedBy("kueue.x-k8s.io/multikueue")), job()),
			errs: []string{"spec.runPolicy.managedBy"}},

		{name: "nprocPerNode auto", obj: object(job().WithNproc("auto"))},
		{name: "nprocPerNode gpu", obj: object(job().WithNproc("gpu"))},
		{name: "nprocPerNode 8", obj: object(job().WithNproc("8"))},
		{name: "nprocPerNode 0", obj: object(job().WithNproc("0")), errs: []string{"spec.nprocPerNode"}},
		{name: "nprocPerNode word", obj: object(job().WithNproc("two")), errs: []string{"spec.nprocPerNode"}},
	})
}

func TestKubeflowElasticRules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "valid elastic job", obj: object(job().WithElastic(1, 3).WithWorker(2).WithCheckpointVolume())},

		{name: "elastic requires a Worker", obj: object(job().WithElastic(1, 1).WithoutReplica("Worker").WithMaster(builders.Ptr[int32](1))),
			errs: []string{"spec.pytorchReplicaSpecs[Worker]"}},

		{name: "nProcPerNode is deprecated", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = builders.Ptr[int32](2) })),
			warn: "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"},
		{name: "nProcPerNode with nprocPerNode", obj: object(job().WithElastic(1, 1).WithNproc("2").WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = builders.Ptr[int32](2) })),
			errs: []string{"spec.elasticPolicy.nProcPerNode"}},
		{name: "nProcPerNode 0", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = builders.Ptr[int32](0) })),
			errs: []string{"spec.elasticPolicy.nProcPerNode"}},

		{name: "minReplicas 1", obj: object(job().WithElastic(1, 1))},
		{name: "minReplicas 0", obj: object(job().WithElastic(0, 2)), errs: []string{"spec.elasticPolicy.minReplicas"}},
		{name: "maxReplicas equal to min", obj: object(job().WithElastic(2, 2).WithWorker(2))},
		{name: "maxReplicas below min", obj: object(job().WithElastic(3, 2).WithWorker(2)), errs: []string{"spec.elasticPolicy.maxReplicas"}},
		{name: "maxReplicas 0", obj: object(job().WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxReplicas = builders.Ptr[int32](0) }).WithoutReplica("Master")),
			errs: []string{"spec.elasticPolicy.maxReplicas"}},

		{name: "Workers within range", obj: object(job().WithElastic(2, 4).WithWorker(4))},
		{name: "Workers below min", obj: object(job().WithElastic(2, 4).WithWorker(1)), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "Workers above max", obj: object(job().WithElastic(2, 4).WithWorker(5)), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "unset Worker replicas default to 1", obj: object(job().WithElastic(2, 4).WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.Replicas = nil })),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "unset minReplicas defaults to maxReplicas", obj: object(job().WithoutReplica("Master").WithWorker(2).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxReplicas = builders.Ptr[int32](3) })),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "no bounds default to the Worker count", obj: object(job().WithoutReplica("Master").WithWorker(3).WithPolicy(func(*kubeflowv1.ElasticPolicy) {}))},

		{name: "rdzvBackend c10d", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = builders.Ptr("c10d") }))},
		{name: "rdzvBackend unknown", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = builders.Ptr("zookeeper") })),
			errs: []string{"spec.elasticPolicy.rdzvBackend"}},

		{name: "rdzvPort 29400", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = builders.Ptr[int32](29400) }))},
		{name: "rdzvPort 0", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = builders.Ptr[int32](0) })),
			errs: []string{"spec.elasticPolicy.rdzvPort"}},
		{name: "rdzvPort 65536", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = builders.Ptr[int32](65536) })),
			errs: []string{"spec.elasticPolicy.rdzvPort"}},

		{name: "etcd with rdzvHost", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVBackend, ep.RDZVHost = builders.Ptr("etcd"), builders.Ptr("etcd-service")
		}))},
		{name: "etcd without rdzvHost", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = builders.Ptr("etcd") })),
			errs: []string{"spec.elasticPolicy.rdzvHost"}},
		{name: "etcd-v2 with empty rdzvHost", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVBackend, ep.RDZVHost = builders.Ptr("etcd-v2"), builders.Ptr("")
		})),
			errs: []string{"spec.elasticPolicy.rdzvHost"}},

		{name: "maxRestarts 0", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxRestarts = builders.Ptr[int32](0) }))},
		{name: "maxRestarts -1", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxRestarts = builders.Ptr[int32](-1) })),
			errs: []string{"spec.elasticPolicy.maxRestarts"}},

		{name: "rdzvConf distinct keys", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "timeout", Value: "900"}, {Key: "read_timeout", Value: "60"}}
		}))},
		{name: "rdzvConf empty key", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "", Value: "900"}}
		})), errs: []string{"spec.elasticPolicy.rdzvConf[0].key"}},
		{name: "rdzvConf duplicate key", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "timeout", Value: "900"}, {Key: "timeout", Value: "60"}}
		})), errs: []string{"spec.elasticPolicy.rdzvConf[1].key"}},

		{name: "standalone on one node", obj: object(job().WithElastic(1, 1).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = builders.Ptr(true) }))},
		{name: "standalone on two nodes", obj: object(job().WithElastic(2, 2).WithWorker(2).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = builders.Ptr(true) })),
			errs: []string{"spec.elasticPolicy.standalone"}},
		{name: "standalone that could scale out", obj: object(job().WithElastic(1, 3).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = builders.Ptr(true) })),
			errs: []string{"spec.elasticPolicy.standalone"}},

		{name: "metrics with a range", obj: object(job().WithElastic(1, 3).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Metrics = []kubeflowv1.MetricRaw{{"type": "Resource"}} })),
			noWarn: "autoscaler"},
		{name: "metrics with min == max", obj: object(job().WithElastic(2, 2).WithWorker(2).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Metrics = []kubeflowv1.MetricRaw{{"type": "Resource"}} })),
			warn: "spec.elasticPolicy.metrics: minReplicas equals maxReplicas (2), so the autoscaler can do nothing"},
	})
}

// TestKubeflowAllErrorsAtOnce checks that every problem is reported in one
// answer, so a user fixes a job in one round trip.
func TestKubeflowAllErrorsAtOnce(t *testing.T) {
	obj := object(job().WithName("Bad_Name").WithMaster(builders.Ptr[int32](3)).WithElastic(3, 2).WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
		ep.RDZVBackend, ep.RDZVPort, ep.MaxRestarts = builders.Ptr("zk"), builders.Ptr[int32](0), builders.Ptr[int32](-5)
	}).WithNproc("many"))
	res := validate(t, obj)
	assert.ElementsMatch(t, []string{
		"metadata.name", "spec.nprocPerNode", "spec.elasticPolicy.maxReplicas", "spec.elasticPolicy.rdzvBackend",
		"spec.elasticPolicy.rdzvPort", "spec.elasticPolicy.maxRestarts",
	}, paths(res.Errors))
}

// TestKubeflowMessages pins messages that tell the user the fix.
func TestKubeflowMessages(t *testing.T) {
	res := validate(t, object(job().WithElastic(3, 2).WithWorker(2)))
	if assert.Len(t, res.Errors, 1) {
		assert.Equal(t, "spec.elasticPolicy.maxReplicas: Invalid value: 2: must be ≥ minReplicas (3); raise maxReplicas or lower minReplicas", res.Errors[0].Error())
	}
	res = validate(t, object(job().WithElastic(2, 4).WithWorker(1)))
	if assert.Len(t, res.Errors, 1) {
		assert.Equal(t, "spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: 1: must be between spec.elasticPolicy.minReplicas (2) and spec.elasticPolicy.maxReplicas (4); set replicas in that range or change the elastic policy", res.Errors[0].Error())
	}
}
