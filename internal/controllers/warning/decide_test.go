package warning

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/jobs"
)

func defaultRules(t *testing.T) Rules {
	t.Helper()
	r, err := NewRules(configv1alpha1.Default().NodeWarnings)
	require.NoError(t, err)
	return r
}

func nodeWith(conds map[string]corev1.ConditionStatus, taints ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	for typ, st := range conds {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: st})
	}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Value: "x", Effect: corev1.TaintEffectNoSchedule})
	}
	return n
}

func TestWarnings(t *testing.T) {
	def := defaultRules(t)
	custom, err := NewRules(configv1alpha1.NodeWarningsConfig{
		Conditions: []string{"KernelDeadlock=True", "GPUHealthy=False", "Ready=Unknown"}, Taints: []string{"example.com/gpu-failing"}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		rules Rules
		node  *corev1.Node
		want  []string
	}{
		{"healthy node", def, nodeWith(map[string]corev1.ConditionStatus{"Ready": "True"}), nil},
		{"maintenance planned", def, nodeWith(map[string]corev1.ConditionStatus{"Ready": "True", "MaintenancePlanned": "True"}),
			[]string{"MaintenancePlanned=True"}},
		{"maintenance over", def, nodeWith(map[string]corev1.ConditionStatus{"MaintenancePlanned": "False"}), nil},
		{"status unknown is not True", def, nodeWith(map[string]corev1.ConditionStatus{"DrainInProgress": "Unknown"}), nil},
		{"all four, sorted", def, nodeWith(map[string]corev1.ConditionStatus{"MaintenancePlanned": "True", "MaintenanceInProgress": "True",
			"DrainInProgress": "True", "GracefulNodeShutdownInProgress": "True"}),
			[]string{"DrainInProgress=True", "GracefulNodeShutdownInProgress=True", "MaintenanceInProgress=True", "MaintenancePlanned=True"}},
		{"a taint the defaults do not listen to", def, nodeWith(nil, "example.com/gpu-failing"), nil},
		{"npd condition", custom, nodeWith(map[string]corev1.ConditionStatus{"KernelDeadlock": "True"}), []string{"KernelDeadlock=True"}},
		{"GPU agent: healthy False", custom, nodeWith(map[string]corev1.ConditionStatus{"GPUHealthy": "False"}), []string{"GPUHealthy=False"}},
		{"GPU agent: healthy True", custom, nodeWith(map[string]corev1.ConditionStatus{"GPUHealthy": "True"}), nil},
		{"custom rules drop the defaults", custom, nodeWith(map[string]corev1.ConditionStatus{"MaintenancePlanned": "True"}), nil},
		{"taint by key, any value", custom, nodeWith(nil, "example.com/gpu-failing"), []string{"taint example.com/gpu-failing"}},
		{"taint twice", custom, nodeWith(nil, "example.com/gpu-failing", "example.com/gpu-failing"), []string{"taint example.com/gpu-failing"}},
		{"other taint", custom, nodeWith(nil, "node.kubernetes.io/unschedulable"), nil},
		{"condition and taint", custom, nodeWith(map[string]corev1.ConditionStatus{"Ready": "Unknown"}, "example.com/gpu-failing"),
			[]string{"Ready=Unknown", "taint example.com/gpu-failing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.rules.Warnings(tc.node))
		})
	}
	_, err = NewRules(configv1alpha1.NodeWarningsConfig{Conditions: []string{"MaintenancePlanned"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nodeWarnings.conditions[0]")
}

func key(name string) jobs.Key {
	return jobs.Key{Namespace: "team", APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: name}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	limits := LimitsFrom(configv1alpha1.Default().NodeWarnings) // 5m, 0.5, at least 2
	a, b := key("a"), key("b")
	for _, tc := range []struct {
		name              string
		jobs              []jobs.Key
		carriers, warning int
		last              map[jobs.Key]time.Time
		limits            *Limits
		ask               []jobs.Key
		skip              []Skip
		brake             bool
	}{
		{name: "one job, one warning node of ten", jobs: []jobs.Key{a}, carriers: 10, warning: 1, ask: []jobs.Key{a}},
		{name: "two ranks of one job on the node: one request", jobs: []jobs.Key{a, a}, carriers: 10, warning: 1, ask: []jobs.Key{a}},
		{name: "two jobs, sorted", jobs: []jobs.Key{b, a}, carriers: 10, warning: 1, ask: []jobs.Key{a, b}},
		{name: "no job on the node", carriers: 10, warning: 1},
		{name: "asked within the interval", jobs: []jobs.Key{a}, carriers: 10, warning: 1,
			last: map[jobs.Key]time.Time{a: now.Add(-time.Minute)}, skip: []Skip{{Job: a, Reason: SkipInterval, Until: now.Add(4 * time.Minute)}}},
		{name: "asked just at the interval's end", jobs: []jobs.Key{a}, carriers: 10, warning: 1,
			last: map[jobs.Key]time.Time{a: now.Add(-5 * time.Minute)}, ask: []jobs.Key{a}},
		{name: "one job limited, the other asked", jobs: []jobs.Key{a, b}, carriers: 10, warning: 1,
			last: map[jobs.Key]time.Time{b: now.Add(-time.Second)}, ask: []jobs.Key{a}, skip: []Skip{{Job: b, Reason: SkipInterval, Until: now.Add(5*time.Minute - time.Second)}}},
		{name: "the only carrier warns: below the brake's 2 nodes", jobs: []jobs.Key{a}, carriers: 1, warning: 1, ask: []jobs.Key{a}},
		{name: "1 of 2 carriers: not more than half", jobs: []jobs.Key{a}, carriers: 2, warning: 1, ask: []jobs.Key{a}},
		{name: "2 of 4: exactly half holds nothing", jobs: []jobs.Key{a}, carriers: 4, warning: 2, ask: []jobs.Key{a}},
		{name: "2 of 3: brake", jobs: []jobs.Key{a, b}, carriers: 3, warning: 2, brake: true,
			skip: []Skip{{Job: a, Reason: SkipBrake}, {Job: b, Reason: SkipBrake}}},
		{name: "every node of a large cluster: brake", jobs: []jobs.Key{a}, carriers: 1000, warning: 1000, brake: true,
			skip: []Skip{{Job: a, Reason: SkipBrake}}},
		{name: "brake wins over the interval", jobs: []jobs.Key{a}, carriers: 3, warning: 3, brake: true,
			last: map[jobs.Key]time.Time{a: now}, skip: []Skip{{Job: a, Reason: SkipBrake}}},
		{name: "brake off (threshold 1)", jobs: []jobs.Key{a}, carriers: 3, warning: 3,
			limits: &Limits{MinInterval: time.Minute, BrakeThreshold: 1, BrakeMinNodes: 2}, ask: []jobs.Key{a}},
		{name: "brake at least 5 nodes: 4 of 4 pass", jobs: []jobs.Key{a}, carriers: 4, warning: 4,
			limits: &Limits{MinInterval: time.Minute, BrakeThreshold: 0.5, BrakeMinNodes: 5}, ask: []jobs.Key{a}},
		{name: "brake at least 5 nodes: 5 of 6 hold", jobs: []jobs.Key{a}, carriers: 6, warning: 5,
			limits: &Limits{MinInterval: time.Minute, BrakeThreshold: 0.5, BrakeMinNodes: 5}, brake: true, skip: []Skip{{Job: a, Reason: SkipBrake}}},
		{name: "threshold 0.1: 2 of 10 hold", jobs: []jobs.Key{a}, carriers: 10, warning: 2,
			limits: &Limits{MinInterval: time.Minute, BrakeThreshold: 0.1, BrakeMinNodes: 2}, brake: true, skip: []Skip{{Job: a, Reason: SkipBrake}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limits
			if tc.limits != nil {
				l = *tc.limits
			}
			last := tc.last
			if last == nil {
				last = map[jobs.Key]time.Time{}
			}
			p := Decide(Input{Now: now, Jobs: tc.jobs, Carriers: tc.carriers, Warning: tc.warning, LastRequest: last, Limits: l})
			assert.Equal(t, tc.ask, p.Ask)
			assert.Equal(t, tc.skip, p.Skip)
			assert.Equal(t, tc.brake, p.Brake.On, p.Brake.Why)
		})
	}
}

func TestBrakeSaysWhy(t *testing.T) {
	b := judgeBrake(3, 4, LimitsFrom(configv1alpha1.Default().NodeWarnings))
	assert.True(t, b.On)
	assert.Equal(t, "3 of 4 nodes carrying managed pods warn at once (threshold 50%, at least 2)", b.Why)
}

func TestPrune(t *testing.T) {
	now := time.Now()
	last := map[jobs.Key]time.Time{key("old"): now.Add(-time.Hour), key("edge"): now.Add(-5 * time.Minute), key("new"): now.Add(-time.Minute)}
	Prune(last, now, 5*time.Minute)
	assert.Equal(t, map[jobs.Key]time.Time{key("new"): now.Add(-time.Minute)}, last)
}

func runningPod(name, node, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
}

func TestCandidates(t *testing.T) {
	warned := func(n string) bool { return n == "bad" }
	names := func(ps []*corev1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	hostNet := runningPod("hostnet", "good", "10.0.0.9")
	hostNet.Spec.HostNetwork = true
	pending := runningPod("pending", "good", "")
	pending.Status.Phase = corev1.PodPending
	deleting := runningPod("deleting", "good", "10.0.0.8")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	noIP := runningPod("no-ip", "good", "")

	assert.Equal(t, []string{"w1", "w2", "w0"}, names(Candidates([]*corev1.Pod{
		runningPod("w0", "bad", "10.0.0.1"), runningPod("w2", "good", "10.0.0.3"), runningPod("w1", "good", "10.0.0.2")}, warned)),
		"pods off the warning node first, then by name")
	assert.Empty(t, Candidates([]*corev1.Pod{hostNet, pending, deleting, noIP}, warned),
		"never a host-network pod (its IP is the node's), a pod not running, going, or without an IP")
	assert.Len(t, Candidates([]*corev1.Pod{runningPod("a", "x", "10.0.0.1"), runningPod("b", "x", "10.0.0.2"),
		runningPod("c", "x", "10.0.0.3"), runningPod("d", "x", "10.0.0.4")}, warned), maxTries, "a few pods are tried, not the whole job")
}
