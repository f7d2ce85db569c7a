package mutators

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// TaskD opens MindCluster's TaskD port on the training container and, under
// the same switch, MindCluster v26.1's TTP port and rescheduling labels
// (mindcluster.go), each skipped with a warning on its own conflicts. It
// reports whether the TaskD port is in place.
func TaskD(t *Target) bool {
	c := t.TrainingContainer()
	if !t.Policy.TaskD || c == nil {
		return false
	}
	ok := taskDPort(t, c)
	ttpPort(t, c)
	MindClusterLabels(t)
	return ok
}

func taskDPort(t *Target, c *corev1.Container) bool {
	port := t.Policy.TaskDPort
	for _, p := range c.Ports {
		switch {
		case p.Name == contract.TaskDPortName && p.ContainerPort == port:
			return true
		case p.Name == contract.TaskDPortName:
			t.Warnf("container %q uses port name %q for port %d; TaskD port %d not injected (rename that port)", c.Name, p.Name, p.ContainerPort, port)
			return false
		case p.ContainerPort == port:
			t.Warnf("container %q already uses port %d (named %q); TaskD port not injected (move that port or set trainguard.io/taskd: disabled)", c.Name, port, p.Name)
			return false
		}
	}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: contract.TaskDPortName, ContainerPort: port, Protocol: corev1.ProtocolTCP})
	return true
}
