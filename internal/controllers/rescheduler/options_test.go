package rescheduler

import (
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/config"
	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
)

func TestBindFlags(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.BindFlags(fs)
	require.NoError(t, fs.Parse(nil))
	assert.Equal(t, DefaultOptions(), o, "no flag keeps the defaults")
	assert.Equal(t, Options{Enabled: true, NodeLostGrace: time.Minute, GraceOverTime: 900 * time.Second, BadNodeTTL: time.Hour,
		MaxBadNodes: 16, BackoffBase: 10 * time.Second, BackoffMax: 5 * time.Minute,
		ForceDeleteAfter: 40 * time.Second, LeaseLostAfter: 40 * time.Second, NodeEvictionRate: 0.1, NodeEvictionBurst: 3, UnhealthyZoneThreshold: 0.55,
		UnhealthyClusterThreshold: 0.5, RetryEvictionRate: 1, RetryEvictionBurst: 32}, o)

	require.NoError(t, fs.Parse([]string{"--rescheduler=false", "--node-lost-grace=30s", "--grace-over-time=5m",
		"--bad-node-ttl=2h", "--max-bad-nodes=4", "--unknown-exit-code-retryable", "--reschedule-backoff-base=1s", "--reschedule-backoff-max=1m",
		"--force-delete-after=10m", "--lease-lost-after=1m", "--node-eviction-rate=0.5", "--node-eviction-burst=1", "--unhealthy-zone-threshold=0.3",
		"--unhealthy-cluster-threshold=0.7", "--retry-eviction-rate=2", "--retry-eviction-burst=5"}))
	assert.Equal(t, Options{NodeLostGrace: 30 * time.Second, GraceOverTime: 5 * time.Minute, BadNodeTTL: 2 * time.Hour,
		MaxBadNodes: 4, DefaultRetryable: true, BackoffBase: time.Second, BackoffMax: time.Minute,
		ForceDeleteAfter: 10 * time.Minute, LeaseLostAfter: time.Minute, NodeEvictionRate: 0.5, NodeEvictionBurst: 1, UnhealthyZoneThreshold: 0.3,
		UnhealthyClusterThreshold: 0.7, RetryEvictionRate: 2, RetryEvictionBurst: 5}, o)
	o.Namespace = "trainguard-system" // set by serve --namespace
	assert.NoError(t, o.Validate())
}

func TestValidate(t *testing.T) {
	o := DefaultOptions()
	o.NodeLostGrace = 0
	o.MaxBadNodes = 0
	o.BackoffMax = time.Second
	o.UnhealthyZoneThreshold = 1.5
	o.NodeEvictionBurst = 0
	o.UnhealthyClusterThreshold = 0
	o.RetryEvictionRate = -1
	o.RetryEvictionBurst = 0
	err := o.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--node-lost-grace")
	assert.Contains(t, err.Error(), "--max-bad-nodes")
	assert.Contains(t, err.Error(), "--reschedule-backoff-max")
	assert.Contains(t, err.Error(), "--unhealthy-zone-threshold must be in (0, 1], got 1.5")
	assert.Contains(t, err.Error(), "--node-eviction-burst")
	assert.Contains(t, err.Error(), "--unhealthy-cluster-threshold must be in (0, 1], got 0")
	assert.Contains(t, err.Error(), "--retry-eviction-rate must not be negative")
	assert.Contains(t, err.Error(), "--retry-eviction-burst must be at least 1")
	assert.Contains(t, err.Error(), "set --namespace")
}

func TestJobKeyOf(t *testing.T) {
	kubeflow := JobKeyOf(newPod())
	assert.Equal(t, JobKey{Namespace: "team", APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "job"}, kubeflow)
	byLabel := JobKeyOf(newPod(func(p *corev1.Pod) { p.OwnerReferences = nil }))
	assert.Equal(t, kubeflow.RecordName(), byLabel.RecordName(), "label fallback finds the same record")

	kubedl := JobKeyOf(newPod(func(p *corev1.Pod) {
		p.OwnerReferences = nil
		p.Labels = map[string]string{kubeflowv1.LabelLegacyJobName: "job", kubeflowv1.LabelGroupName: "training.kubedl.io"}
	}))
	assert.Equal(t, "training.kubedl.io/v1alpha1", kubedl.APIVersion)
	assert.NotEqual(t, kubeflow.RecordName(), kubedl.RecordName(), "same name, different kind of job")

	barePod := JobKeyOf(newPod(bare, func(p *corev1.Pod) { p.Name = "job" }))
	assert.True(t, barePod.Bare())
	assert.NotEqual(t, kubeflow.RecordName(), barePod.RecordName())

	long := JobKeyOf(newPod(func(p *corev1.Pod) { p.OwnerReferences[0].Name = string(make([]byte, 300)) }))
	assert.LessOrEqual(t, len(long.RecordName()), 253)
	// Non-controller owners do not make a job.
	notController := JobKeyOf(newPod(func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}}
	}))
	assert.True(t, notController.Bare())
}

func TestRequireNotOnNodesMergesIntoEveryTerm(t *testing.T) {
	spec := &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100"}}}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: hostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"z"}}}},
		}},
	}}}
	podspec.RequireNotOnNodes(spec, []string{"b", "a"})
	podspec.RequireNotOnNodes(spec, []string{"a"}) // idempotent
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	assert.Equal(t, []corev1.NodeSelectorRequirement{
		{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100"}},
		{Key: hostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a", "b"}},
	}, terms[0].MatchExpressions)
	assert.Equal(t, []corev1.NodeSelectorRequirement{
		{Key: hostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a", "b", "z"}},
	}, terms[1].MatchExpressions)

	empty := &corev1.PodSpec{}
	podspec.RequireNotOnNodes(empty, nil)
	assert.Nil(t, empty.Affinity, "no bad node, no affinity")
}

// hostnameLabel is the node label the anti-affinity matches.
const hostnameLabel = "kubernetes.io/hostname"

// The rescheduler reads every setting of its Configuration block: a block
// with every value changed leaves no option at its default.
func TestOptionsFromReadsEveryConfigurationField(t *testing.T) {
	cfg, err := config.ParseConfig([]byte(`apiVersion: config.trainguard.io/v1alpha1
kind: Configuration
rescheduler: {enabled: false, nodeLostGrace: 61s, graceOverTime: 901s, badNodeTTL: 2h, maxBadNodes: 17,
  unknownExitCodeRetryable: true, backoffBase: 11s, backoffMax: 6m, forceDeleteAfter: 41s, leaseLostAfter: 42s,
  nodeEvictionRate: 0.2, nodeEvictionBurst: 4, unhealthyZoneThreshold: 0.6, unhealthyClusterThreshold: 0.7,
  retryEvictionRate: 3, retryEvictionBurst: 33}
`))
	require.NoError(t, err)
	got, def := reflect.ValueOf(OptionsFrom(cfg.Rescheduler, "ns")), reflect.ValueOf(DefaultOptions())
	for i := range got.NumField() {
		assert.NotEqual(t, def.Field(i).Interface(), got.Field(i).Interface(), "Options.%s is not read from the Configuration", got.Type().Field(i).Name)
	}
}
