package v1alpha1

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

// TestValidateRefusesValuesThatBreakTheProcess: each value an audit found
// accepted, and harmful (a brake that holds for ever, a pod the API server
// refuses, a volume over /usr, an entry that matches nothing), is refused
// with its field's path and why; the boundary values next to it pass.
func TestValidateRefusesValuesThatBreakTheProcess(t *testing.T) {
	d := func(s string) time.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		set  func(c *Configuration)
		// field and detail: the one error wanted; both empty for a valid value.
		field, detail string
	}{
		{"leaseLostAfter 1s", func(c *Configuration) { c.Rescheduler.LeaseLostAfter.Duration = d("1s") },
			"rescheduler.leaseLostAfter", `Invalid value: "1s": must be at least 20s: twice the kubelet's node Lease renewal interval (10s by default)`},
		{"leaseLostAfter 8s", func(c *Configuration) { c.Rescheduler.LeaseLostAfter.Duration = d("8s") },
			"rescheduler.leaseLostAfter", "healthy nodes look silent before each renewal and the cluster brake can hold every action, a real node loss included; set it to 20s or more (default 25s)"},
		{"leaseLostAfter 15s", func(c *Configuration) { c.Rescheduler.LeaseLostAfter.Duration = d("15s") },
			"rescheduler.leaseLostAfter", "must be at least 20s"},
		{"leaseLostAfter 19.999s", func(c *Configuration) { c.Rescheduler.LeaseLostAfter.Duration = d("19.999s") },
			"rescheduler.leaseLostAfter", "must be at least 20s"},
		{"leaseLostAfter 20s", func(c *Configuration) { c.Rescheduler.LeaseLostAfter.Duration = d("20s") }, "", ""},
		{"checkpoint interval 5s", func(c *Configuration) { c.Checkpoint.Interval.Duration = d("5s") },
			"checkpoint.interval", "must be 0s (off) or between 10s and 24h0m0s, such as 10m"},
		{"checkpoint interval 25h", func(c *Configuration) { c.Checkpoint.Interval.Duration = d("25h") },
			"checkpoint.interval", "must be 0s (off) or between 10s and 24h0m0s"},
		{"checkpoint interval 10s", func(c *Configuration) { c.Checkpoint.Interval.Duration = d("10s") }, "", ""},
		{"checkpoint interval off", func(c *Configuration) { c.Checkpoint.Interval.Duration = 0 }, "", ""},
		{"leaseLostAfter 0s", func(c *Configuration) { c.Rescheduler.LeaseLostAfter.Duration = 0 },
			"rescheduler.leaseLostAfter", "must be positive"},

		{"forceDeleteAfter 1ns", func(c *Configuration) { c.Rescheduler.ForceDeleteAfter.Duration = 1 },
			"rescheduler.forceDeleteAfter", "must be at least 10s: a force delete bypasses PodDisruptionBudgets"},
		{"forceDeleteAfter 9.9s", func(c *Configuration) { c.Rescheduler.ForceDeleteAfter.Duration = d("9.9s") },
			"rescheduler.forceDeleteAfter", "must be at least 10s"},
		{"forceDeleteAfter 10s", func(c *Configuration) { c.Rescheduler.ForceDeleteAfter.Duration = d("10s") }, "", ""},

		{"nodeLostGrace 1ms", func(c *Configuration) { c.Rescheduler.NodeLostGrace.Duration = d("1ms") },
			"rescheduler.nodeLostGrace", "must be at least 10s: a restarting kubelet reports NotReady"},
		{"nodeLostGrace 9s", func(c *Configuration) { c.Rescheduler.NodeLostGrace.Duration = d("9s") },
			"rescheduler.nodeLostGrace", "must be at least 10s"},
		{"nodeLostGrace 10s", func(c *Configuration) { c.Rescheduler.NodeLostGrace.Duration = d("10s") }, "", ""},

		{"warning condition without status", func(c *Configuration) { c.NodeWarnings.Conditions = []string{"MaintenancePlanned"} },
			"nodeWarnings.conditions[0]", "no '=': write Type=Status, e.g. MaintenancePlanned=True"},
		{"warning condition status lower case", func(c *Configuration) { c.NodeWarnings.Conditions = []string{"KernelDeadlock=true"} },
			"nodeWarnings.conditions[0]", `status "true" is not True, False or Unknown`},
		{"warning condition type not a name", func(c *Configuration) { c.NodeWarnings.Conditions = []string{"Kernel Deadlock=True"} },
			"nodeWarnings.conditions[0]", `condition type "Kernel Deadlock" is not a qualified name`},
		{"warning conditions none", func(c *Configuration) { c.NodeWarnings.Conditions = []string{} }, "", ""},
		{"warning condition of an agent", func(c *Configuration) { c.NodeWarnings.Conditions = []string{"example.com/GPUHealthy=False"} }, "", ""},
		{"warning taint not a key", func(c *Configuration) { c.NodeWarnings.Taints = []string{"gpu failing"} },
			"nodeWarnings.taints[0]", "must be a taint key such as example.com/gpu-unhealthy"},
		{"warning commitTimeout 1s", func(c *Configuration) { c.NodeWarnings.CommitTimeout.Duration = d("1s") },
			"nodeWarnings.commitTimeout", "must be between 5s and 1h0m0s"},
		{"warning minInterval 0s", func(c *Configuration) { c.NodeWarnings.MinInterval.Duration = 0 },
			"nodeWarnings.minInterval", "must be between 10s and 24h0m0s"},
		{"warning brakeThreshold 0", func(c *Configuration) { c.NodeWarnings.BrakeThreshold = 0 },
			"nodeWarnings.brakeThreshold", "must be above 0 and at most 1 (1 disables the brake)"},
		{"warning brakeMinNodes 0", func(c *Configuration) { c.NodeWarnings.BrakeMinNodes = 0 },
			"nodeWarnings.brakeMinNodes", "must be at least 1"},
		{"warning brake off", func(c *Configuration) { c.NodeWarnings.BrakeThreshold = 1 }, "", ""},

		{"imagePullPolicy Sometimes", func(c *Configuration) { c.Agent.ImagePullPolicy = "Sometimes" },
			"agent.imagePullPolicy", `supported values: "Always", "IfNotPresent", "Never"`},
		{"imagePullPolicy always", func(c *Configuration) { c.Agent.ImagePullPolicy = "always" },
			"agent.imagePullPolicy", "supported values"},
		{"imagePullPolicy Always", func(c *Configuration) { c.Agent.ImagePullPolicy = corev1.PullAlways }, "", ""},
		{"imagePullPolicy Never", func(c *Configuration) { c.Agent.ImagePullPolicy = corev1.PullNever }, "", ""},
		{"imagePullPolicy IfNotPresent", func(c *Configuration) { c.Agent.ImagePullPolicy = corev1.PullIfNotPresent }, "", ""},

		{"resourceName 'not a name'", func(c *Configuration) { c.GPU.ResourceName = "not a name" },
			"gpu.resourceName", "must be an extended resource name such as nvidia.com/gpu"},
		{"resourceName without a domain", func(c *Configuration) { c.GPU.ResourceName = "gpu" },
			"gpu.resourceName", `"gpu" has no domain`},
		{"resourceName cpu", func(c *Configuration) { c.GPU.ResourceName = "cpu" }, "gpu.resourceName", "has no domain"},
		{"resourceName in kubernetes.io", func(c *Configuration) { c.GPU.ResourceName = "kubernetes.io/gpu" },
			"gpu.resourceName", "Kubernetes' own domain"},
		{"resourceName in a kubernetes.io subdomain", func(c *Configuration) { c.GPU.ResourceName = "gpu.kubernetes.io/gpu" },
			"gpu.resourceName", "Kubernetes' own domain"},
		{"resourceName with the quota prefix", func(c *Configuration) { c.GPU.ResourceName = "requests.example.com/gpu" },
			"gpu.resourceName", "quota prefix"},
		{"resourceName with an upper-case domain", func(c *Configuration) { c.GPU.ResourceName = "Example.com/gpu" },
			"gpu.resourceName", "must be an extended resource name"},
		{"resourceName with an empty name", func(c *Configuration) { c.GPU.ResourceName = "example.com/" },
			"gpu.resourceName", "must be an extended resource name"},
		{"resourceName of 64 characters", func(c *Configuration) {
			c.GPU.ResourceName = corev1.ResourceName("example.com/" + strings.Repeat("g", 64))
		},
			"gpu.resourceName", "must be an extended resource name"},
		{"resourceName of 63 characters", func(c *Configuration) {
			c.GPU.ResourceName = corev1.ResourceName("example.com/" + strings.Repeat("g", 63))
		}, "", ""},
		{"resourceName huawei.com/Ascend910", func(c *Configuration) { c.GPU.ResourceName = "huawei.com/Ascend910" }, "", ""},
		{"resourceName amd.com/gpu", func(c *Configuration) { c.GPU.ResourceName = "amd.com/gpu" }, "", ""},

		{"agent.path /", func(c *Configuration) { c.Agent.Path = "/" }, "agent.path", "must not be the root directory"},
		{"agent.path /usr", func(c *Configuration) { c.Agent.Path = "/usr" }, "agent.path", "the system directory /usr"},
		{"agent.path under /usr", func(c *Configuration) { c.Agent.Path = "/usr/local/bin" }, "agent.path", "the system directory /usr"},
		{"agent.path /bin", func(c *Configuration) { c.Agent.Path = "/bin" }, "agent.path", "the system directory /bin"},
		{"agent.path /sbin", func(c *Configuration) { c.Agent.Path = "/sbin" }, "agent.path", "the system directory /sbin"},
		{"agent.path /lib", func(c *Configuration) { c.Agent.Path = "/lib" }, "agent.path", "the system directory /lib"},
		{"agent.path /lib64/x", func(c *Configuration) { c.Agent.Path = "/lib64/x" }, "agent.path", "the system directory /lib"},
		{"agent.path /etc/x", func(c *Configuration) { c.Agent.Path = "/etc/x" }, "agent.path", "the system directory /etc"},
		{"agent.path /proc", func(c *Configuration) { c.Agent.Path = "/proc" }, "agent.path", "the system directory /proc"},
		{"agent.path /sys/x", func(c *Configuration) { c.Agent.Path = "/sys/x" }, "agent.path", "the system directory /sys"},
		{"agent.path /dev", func(c *Configuration) { c.Agent.Path = "/dev" }, "agent.path", "the system directory /dev"},
		{"agent.path /boot", func(c *Configuration) { c.Agent.Path = "/boot" }, "agent.path", "the system directory /boot"},
		{"agent.path /run/x", func(c *Configuration) { c.Agent.Path = "/run/x" }, "agent.path", "the system directory /run"},
		{"agent.path /var/run", func(c *Configuration) { c.Agent.Path = "/var/run" }, "agent.path", "the system directory /var/run"},
		{"agent.path /var, above /var/run", func(c *Configuration) { c.Agent.Path = "/var" }, "agent.path", "above the system directory /var/run"},
		{"agent.path relative", func(c *Configuration) { c.Agent.Path = "opt/x" }, "agent.path", "must be an absolute path"},
		{"agent.path unclean", func(c *Configuration) { c.Agent.Path = "/opt/../x" }, "agent.path", `must be a clean path; use "/x"`},
		{"agent.path trailing slash", func(c *Configuration) { c.Agent.Path = "/opt/x/" }, "agent.path", "must be a clean path"},
		{"agent.path /usrx", func(c *Configuration) { c.Agent.Path = "/usrx" }, "", ""},
		{"agent.path /var/lib/trainguard", func(c *Configuration) { c.Agent.Path = "/var/lib/trainguard" }, "", ""},
		{"agent.path /opt/tg", func(c *Configuration) { c.Agent.Path = "/opt/tg" }, "", ""},

		{"trainingContainer.names ['']", func(c *Configuration) { c.TrainingContainer.Names = []string{""} },
			"trainingContainer.names[0]", "must be a container name (a DNS-1123 label)"},
		{"trainingContainer.names [pytorch, Trainer]", func(c *Configuration) { c.TrainingContainer.Names = []string{"pytorch", "Trainer"} },
			"trainingContainer.names[1]", "must be a container name"},
		{"trainingContainer.names [a_b]", func(c *Configuration) { c.TrainingContainer.Names = []string{"a_b"} },
			"trainingContainer.names[0]", "must be a container name"},
		{"trainingContainer.names 64 characters", func(c *Configuration) { c.TrainingContainer.Names = []string{strings.Repeat("a", 64)} },
			"trainingContainer.names[0]", "must be a container name"},
		{"trainingContainer.names 63 characters", func(c *Configuration) { c.TrainingContainer.Names = []string{strings.Repeat("a", 63), "trainer-0"} }, "", ""},

		{"excludedNamespaces ['*']", func(c *Configuration) { c.ExcludedNamespaces = []string{"kube-system", "*"} },
			"excludedNamespaces[1]", "must be a namespace name, not a pattern (a DNS-1123 label)"},
		{"excludedNamespaces ['']", func(c *Configuration) { c.ExcludedNamespaces = []string{""} },
			"excludedNamespaces[0]", "must be a namespace name"},
		{"excludedNamespaces ['team-*']", func(c *Configuration) { c.ExcludedNamespaces = []string{"team-*"} },
			"excludedNamespaces[0]", "must be a namespace name"},
		{"excludedNamespaces [Batch]", func(c *Configuration) { c.ExcludedNamespaces = []string{"Batch"} },
			"excludedNamespaces[0]", "must be a namespace name"},
		{"excludedNamespaces [batch-system]", func(c *Configuration) { c.ExcludedNamespaces = []string{"batch-system", "kube-system"} }, "", ""},

		{"priorityBoost.minInterval 1ns", func(c *Configuration) { c.PriorityBoost.MinInterval.Duration = 1 },
			"priorityBoost.minInterval", "must be between 10s and 1h0m0s: trainguard reads each job's work at risk every 10s"},
		{"priorityBoost.minInterval 9s", func(c *Configuration) { c.PriorityBoost.MinInterval.Duration = d("9s") },
			"priorityBoost.minInterval", "must be between 10s and 1h0m0s"},
		{"priorityBoost.minInterval 0s", func(c *Configuration) { c.PriorityBoost.MinInterval.Duration = 0 },
			"priorityBoost.minInterval", "must be between 10s and 1h0m0s"},
		{"priorityBoost.minInterval 61m", func(c *Configuration) { c.PriorityBoost.MinInterval.Duration = d("61m") },
			"priorityBoost.minInterval", "must be between 10s and 1h0m0s"},
		{"priorityBoost.minInterval 10s", func(c *Configuration) { c.PriorityBoost.MinInterval.Duration = d("10s") }, "", ""},
		{"priorityBoost.minInterval 1h", func(c *Configuration) { c.PriorityBoost.MinInterval.Duration = d("1h") }, "", ""},

		{"leaseDuration 1000h", func(c *Configuration) { c.LeaderElection.LeaseDuration.Duration = d("1000h") },
			"leaderElection.leaseDuration", "must be at most 5m0s: when the leader dies, the other replicas wait this long"},
		{"leaseDuration 5m1s", func(c *Configuration) { c.LeaderElection.LeaseDuration.Duration = d("5m1s") },
			"leaderElection.leaseDuration", "must be at most 5m0s"},
		{"leaseDuration 5m", func(c *Configuration) { c.LeaderElection.LeaseDuration.Duration = d("5m") }, "", ""},
		{"renewDeadline 1000h", func(c *Configuration) { c.LeaderElection.RenewDeadline.Duration = d("1000h") },
			"leaderElection.renewDeadline", "must be below leaseDuration (15s)"},
		{"retryPeriod 1000h", func(c *Configuration) {
			c.LeaderElection.LeaseDuration.Duration, c.LeaderElection.RenewDeadline.Duration, c.LeaderElection.RetryPeriod.Duration = d("5m"), d("4m"), d("1000h")
		}, "leaderElection.retryPeriod", "must be below renewDeadline (4m0s) / 1.2"},
		{"the longest leader election", func(c *Configuration) {
			c.LeaderElection.LeaseDuration.Duration, c.LeaderElection.RenewDeadline.Duration, c.LeaderElection.RetryPeriod.Duration = d("5m"), d("4m59s"), d("4m9s")
		}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.set(c)
			errs := Validate(c)
			if tc.field == "" {
				assert.Empty(t, errs)
				return
			}
			if assert.Len(t, errs, 1, "%v", errs) {
				assert.Equal(t, tc.field, errs[0].Field)
				assert.Contains(t, errs[0].Error(), tc.field+": ")
				assert.Contains(t, errs[0].Error(), tc.detail)
			}
		})
	}
}

// TestRescheduleFloorsAreTheOperatorsOnly: a Configuration built in code
// (the suites compress the kubelet's time) passes ValidateRescheduler,
// which the controller checks; the file and flags (Validate) do not.
func TestRescheduleFloorsAreTheOperatorsOnly(t *testing.T) {
	c := Default()
	c.Rescheduler.NodeLostGrace.Duration, c.Rescheduler.LeaseLostAfter.Duration, c.Rescheduler.ForceDeleteAfter.Duration = 2*time.Second, 4*time.Second, 4*time.Second
	assert.Empty(t, ValidateRescheduler(&c.Rescheduler, nil))
	var fields []string
	for _, e := range Validate(c) {
		fields = append(fields, e.Field)
	}
	assert.Equal(t, []string{"rescheduler.forceDeleteAfter", "rescheduler.leaseLostAfter", "rescheduler.nodeLostGrace"}, fields)
}
