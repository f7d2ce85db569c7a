package validators

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	kubeflowv1 "github.com/trainguard/trainguard/internal/apis/kubeflow/v1"
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
		{name: "valid job", obj: job().object()},

		{name: "name is a DNS-1035 label", obj: job().withName("train-1").object()},
		{name: "name not a DNS-1035 label", obj: job().withName("1-Train").object(), errs: []string{"metadata.name"}},
		{name: "generateName prefix is checked offline", obj: job().withName("").with(func(j *kubeflowv1.PyTorchJob) { j.GenerateName = "Train." }).object(), errs: []string{"metadata.generateName"}},
		{name: "generateName prefix ok", obj: job().withName("").with(func(j *kubeflowv1.PyTorchJob) { j.GenerateName = "train-" }).object()},

		{name: "replica specs required", obj: job().withoutReplica("Master").withoutReplica("Worker").object(), errs: []string{"spec.pytorchReplicaSpecs"}},
		{name: "only Master and Worker", obj: job().withReplica("Chief", func(*kubeflowv1.ReplicaSpec) {}).object(), errs: []string{"spec.pytorchReplicaSpecs[Chief]"}},

		{name: "containers required", obj: job().withReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.Template.Spec.Containers = nil }).object(),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers"}},
		{name: "image required", obj: job().withWorkerContainer(func(c *corev1.Container) { c.Image = "" }).object(),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image"}},
		{name: "pytorch container required", obj: job().withWorkerContainer(func(c *corev1.Container) { c.Name = "main" }).object(),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers"}},
		{name: "pytorch container need not be first", obj: job().withReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) {
			rs.Template.Spec.Containers = []corev1.Container{container("sidecar"), container("pytorch")}
		}).object()},

		// kubeflow's webhook refuses it ("[Master].replicas must be 1"); so does trainguard.
		{name: "Master replicas unset", obj: job().withMaster(nil).object(), errs: []string{"spec.pytorchReplicaSpecs[Master].replicas"}},
		{name: "Master replicas 1", obj: job().withMaster(ptr[int32](1)).object()},
		{name: "Master replicas 2", obj: job().withMaster(ptr[int32](2)).object(), errs: []string{"spec.pytorchReplicaSpecs[Master].replicas"}},
		{name: "Worker replicas 3", obj: job().withWorker(3).object()},
		{name: "Worker replicas 0", obj: job().withWorker(0).object(), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},

		{name: "restartPolicy ExitCode", obj: job().withReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = "ExitCode" }).object()},
		{name: "restartPolicy unknown", obj: job().withReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.RestartPolicy = "Sometimes" }).object(),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].restartPolicy"}},

		{name: "managedBy MultiKueue", obj: job().withManagedBy("kueue.x-k8s.io/multikueue").object()},
		{name: "managedBy training operator", obj: job().withManagedBy("kubeflow.org/training-operator").object()},
		{name: "managedBy unknown", obj: job().withManagedBy("example.com/mine").object(), errs: []string{"spec.runPolicy.managedBy"}},
		{name: "managedBy unchanged on update", obj: updatedFrom(job().withManagedBy("kueue.x-k8s.io/multikueue").withWorker(2).object(), job().withManagedBy("kueue.x-k8s.io/multikueue"))},
		{name: "managedBy changed on update", obj: updatedFrom(job().withManagedBy("kueue.x-k8s.io/multikueue").object(), job()),
			errs: []string{"spec.runPolicy.managedBy"}},

		{name: "nprocPerNode auto", obj: job().withNproc("auto").object()},
		{name: "nprocPerNode gpu", obj: job().withNproc("gpu").object()},
		{name: "nprocPerNode 8", obj: job().withNproc("8").object()},
		{name: "nprocPerNode 0", obj: job().withNproc("0").object(), errs: []string{"spec.nprocPerNode"}},
		{name: "nprocPerNode word", obj: job().withNproc("two").object(), errs: []string{"spec.nprocPerNode"}},
	})
}

func TestKubeflowElasticRules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "valid elastic job", obj: job().withElastic(1, 3).withWorker(2).withCheckpointVolume().object()},

		{name: "elastic requires a Worker", obj: job().withElastic(1, 1).withoutReplica("Worker").withMaster(ptr[int32](1)).object(),
			errs: []string{"spec.pytorchReplicaSpecs[Worker]"}},

		{name: "nProcPerNode is deprecated", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = ptr[int32](2) }).object(),
			warn: "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"},
		{name: "nProcPerNode with nprocPerNode", obj: job().withElastic(1, 1).withNproc("2").withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = ptr[int32](2) }).object(),
			errs: []string{"spec.elasticPolicy.nProcPerNode"}},
		{name: "nProcPerNode 0", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.NProcPerNode = ptr[int32](0) }).object(),
			errs: []string{"spec.elasticPolicy.nProcPerNode"}},

		{name: "minReplicas 1", obj: job().withElastic(1, 1).object()},
		{name: "minReplicas 0", obj: job().withElastic(0, 2).object(), errs: []string{"spec.elasticPolicy.minReplicas"}},
		{name: "maxReplicas equal to min", obj: job().withElastic(2, 2).withWorker(2).object()},
		{name: "maxReplicas below min", obj: job().withElastic(3, 2).withWorker(2).object(), errs: []string{"spec.elasticPolicy.maxReplicas"}},
		{name: "maxReplicas 0", obj: job().withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxReplicas = ptr[int32](0) }).withoutReplica("Master").object(),
			errs: []string{"spec.elasticPolicy.maxReplicas"}},

		{name: "Workers within range", obj: job().withElastic(2, 4).withWorker(4).object()},
		{name: "Workers below min", obj: job().withElastic(2, 4).withWorker(1).object(), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "Workers above max", obj: job().withElastic(2, 4).withWorker(5).object(), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "unset Worker replicas default to 1", obj: job().withElastic(2, 4).withReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.Replicas = nil }).object(),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "unset minReplicas defaults to maxReplicas", obj: job().withoutReplica("Master").withWorker(2).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxReplicas = ptr[int32](3) }).object(),
			errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "no bounds default to the Worker count", obj: job().withoutReplica("Master").withWorker(3).withPolicy(func(*kubeflowv1.ElasticPolicy) {}).object()},

		{name: "rdzvBackend c10d", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = ptr("c10d") }).object()},
		{name: "rdzvBackend unknown", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = ptr("zookeeper") }).object(),
			errs: []string{"spec.elasticPolicy.rdzvBackend"}},

		{name: "rdzvPort 29400", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = ptr[int32](29400) }).object()},
		{name: "rdzvPort 0", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = ptr[int32](0) }).object(),
			errs: []string{"spec.elasticPolicy.rdzvPort"}},
		{name: "rdzvPort 65536", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVPort = ptr[int32](65536) }).object(),
			errs: []string{"spec.elasticPolicy.rdzvPort"}},

		{name: "etcd with rdzvHost", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend, ep.RDZVHost = ptr("etcd"), ptr("etcd-service") }).object()},
		{name: "etcd without rdzvHost", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend = ptr("etcd") }).object(),
			errs: []string{"spec.elasticPolicy.rdzvHost"}},
		{name: "etcd-v2 with empty rdzvHost", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.RDZVBackend, ep.RDZVHost = ptr("etcd-v2"), ptr("") }).object(),
			errs: []string{"spec.elasticPolicy.rdzvHost"}},

		{name: "maxRestarts 0", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxRestarts = ptr[int32](0) }).object()},
		{name: "maxRestarts -1", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.MaxRestarts = ptr[int32](-1) }).object(),
			errs: []string{"spec.elasticPolicy.maxRestarts"}},

		{name: "rdzvConf distinct keys", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "timeout", Value: "900"}, {Key: "read_timeout", Value: "60"}}
		}).object()},
		{name: "rdzvConf empty key", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "", Value: "900"}}
		}).object(), errs: []string{"spec.elasticPolicy.rdzvConf[0].key"}},
		{name: "rdzvConf duplicate key", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) {
			ep.RDZVConf = []kubeflowv1.RDZVConf{{Key: "timeout", Value: "900"}, {Key: "timeout", Value: "60"}}
		}).object(), errs: []string{"spec.elasticPolicy.rdzvConf[1].key"}},

		{name: "standalone on one node", obj: job().withElastic(1, 1).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = ptr(true) }).object()},
		{name: "standalone on two nodes", obj: job().withElastic(2, 2).withWorker(2).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = ptr(true) }).object(),
			errs: []string{"spec.elasticPolicy.standalone"}},
		{name: "standalone that could scale out", obj: job().withElastic(1, 3).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Standalone = ptr(true) }).object(),
			errs: []string{"spec.elasticPolicy.standalone"}},

		{name: "metrics with a range", obj: job().withElastic(1, 3).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Metrics = []kubeflowv1.MetricRaw{{"type": "Resource"}} }).object(),
			noWarn: "autoscaler"},
		{name: "metrics with min == max", obj: job().withElastic(2, 2).withWorker(2).withPolicy(func(ep *kubeflowv1.ElasticPolicy) { ep.Metrics = []kubeflowv1.MetricRaw{{"type": "Resource"}} }).object(),
			warn: "spec.elasticPolicy.metrics: minReplicas equals maxReplicas (2), so the autoscaler can do nothing"},
	})
}

// TestKubeflowAllErrorsAtOnce checks that every problem is reported in one
// answer, so a user fixes a job in one round trip.
func TestKubeflowAllErrorsAtOnce(t *testing.T) {
	obj := job().withName("Bad_Name").withMaster(ptr[int32](3)).withElastic(3, 2).withPolicy(func(ep *kubeflowv1.ElasticPolicy) {
		ep.RDZVBackend, ep.RDZVPort, ep.MaxRestarts = ptr("zk"), ptr[int32](0), ptr[int32](-5)
	}).withNproc("many").object()
	res := validate(t, obj)
	assert.ElementsMatch(t, []string{
		"metadata.name", "spec.nprocPerNode", "spec.elasticPolicy.maxReplicas", "spec.elasticPolicy.rdzvBackend",
		"spec.elasticPolicy.rdzvPort", "spec.elasticPolicy.maxRestarts",
	}, paths(res.Errors))
}

// TestKubeflowMessages pins messages that tell the user the fix.
func TestKubeflowMessages(t *testing.T) {
	res := validate(t, job().withElastic(3, 2).withWorker(2).object())
	if assert.Len(t, res.Errors, 1) {
		assert.Equal(t, "spec.elasticPolicy.maxReplicas: Invalid value: 2: must be ≥ minReplicas (3); raise maxReplicas or lower minReplicas", res.Errors[0].Error())
	}
	res = validate(t, job().withElastic(2, 4).withWorker(1).object())
	if assert.Len(t, res.Errors, 1) {
		assert.Equal(t, "spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: 1: must be between spec.elasticPolicy.minReplicas (2) and spec.elasticPolicy.maxReplicas (4); set replicas in that range or change the elastic policy", res.Errors[0].Error())
	}
}
