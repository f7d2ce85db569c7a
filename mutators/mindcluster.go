package mutators

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// MindCluster v26.1 vocabulary that goes with TaskD (docs/annotations.md,
// "MindCluster"): MindIO TFT's Controller port, which its jobs declare as a
// container port named ttp-port and hand to the trainer as TTP_PORT, and the
// labels that switch on pod-level and process-level rescheduling. They are
// injected under TaskD's switch (trainguard.io/taskd, taskd.enabled, the
// `taskd` mutator), so one opt-out turns every MindCluster port off.
const (
	// TTPPortName and TTPPort are MindIO TFT's Controller port as MindCluster's job templates declare it.
	TTPPortName       = "ttp-port"
	TTPPort     int32 = 8000
	// EnvTTPPort tells the trainer's MindIO TFT which port its Controller listens on.
	EnvTTPPort = "TTP_PORT"
	// LabelPodRescheduling and LabelProcessRecoverEnable switch on MindCluster's
	// pod-level and process-level rescheduling; "on" is the value its docs use.
	LabelPodRescheduling      = "pod-rescheduling"
	LabelProcessRecoverEnable = "process-recover-enable"
	MindClusterOn             = "on"
)

// MindClusterLabels sets pod-rescheduling and process-recover-enable to "on"
// where absent. A value the user set is kept; one other than "on" is
// reported, so nobody wonders why MindCluster does not reschedule.
func MindClusterLabels(t *Target) {
	for _, key := range []string{LabelPodRescheduling, LabelProcessRecoverEnable} {
		if v, ok := t.Meta.Labels[key]; ok {
			if v != MindClusterOn {
				t.Warnf("label %s=%q kept; MindCluster's %s stays as set (trainguard sets %q only where the label is absent)", key, v, key, MindClusterOn)
			}
			continue
		}
		setIfAbsent(&t.Meta.Labels, key, MindClusterOn)
	}
}

// ttpPort adds {name: ttp-port, containerPort: 8000} and TTP_PORT=8000 to the
// training container c. Any sign that the pod already uses port 8000 or
// chose another TTP port skips both, with a warning naming the conflict: a
// port declared twice, or a TTP_PORT that disagrees with the port, would
// send MindIO's heartbeats to the wrong place.
func ttpPort(t *Target, c *corev1.Container) bool {
	if reason := ttpConflict(t.Spec, c); reason != "" {
		t.Warnf("%s; MindIO TTP port %d not injected (set trainguard.io/taskd: disabled to stop all MindCluster ports)", reason, TTPPort)
		return false
	}
	if !hasPort(c, TTPPortName, TTPPort) {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: TTPPortName, ContainerPort: TTPPort, Protocol: corev1.ProtocolTCP})
	}
	ensureEnv(c, corev1.EnvVar{Name: EnvTTPPort, Value: strconv.Itoa(int(TTPPort))})
	return true
}

// ttpConflict says why the TTP port cannot be injected, or "" if it can:
// port 8000 or the name ttp-port used for something else in any container
// of the pod (they share one network namespace), or a TTP_PORT that is not 8000.
func ttpConflict(spec *corev1.PodSpec, c *corev1.Container) string {
	for _, e := range c.Env {
		if e.Name == EnvTTPPort && (e.ValueFrom != nil || e.Value != strconv.Itoa(int(TTPPort))) {
			return fmt.Sprintf("container %q sets %s to %s, not %d", c.Name, EnvTTPPort, describeEnv(e), TTPPort)
		}
	}
	for i := range spec.Containers {
		other := &spec.Containers[i]
		for _, p := range other.Ports {
			exact := other == c && p.Name == TTPPortName && p.ContainerPort == TTPPort
			switch {
			case exact:
			case p.Name == TTPPortName:
				return fmt.Sprintf("container %q uses port name %s for port %d", other.Name, p.Name, p.ContainerPort)
			case p.ContainerPort == TTPPort:
				return fmt.Sprintf("container %q already uses port %d (%s)", other.Name, TTPPort, portLabel(p))
			}
		}
	}
	return ""
}

func hasPort(c *corev1.Container, name string, port int32) bool {
	for _, p := range c.Ports {
		if p.Name == name && p.ContainerPort == port {
			return true
		}
	}
	return false
}

func portLabel(p corev1.ContainerPort) string {
	if p.Name == "" {
		return "unnamed"
	}
	return "named " + strconv.Quote(p.Name)
}

func describeEnv(e corev1.EnvVar) string {
	if e.ValueFrom != nil {
		return "a valueFrom reference"
	}
	return strconv.Quote(e.Value)
}
