package mutators

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
)

// kubeletDefaultGracePeriod is what the kubelet uses when the pod sets none.
const kubeletDefaultGracePeriod = 30

// PreStop makes the training container ask the trainer for a checkpoint
// before it dies: an init container copies trainguard-agent into a shared
// emptyDir and the container's preStop hook runs it. A user's own preStop
// hook is chained after the checkpoint, never dropped.
func PreStop(t *Target) bool {
	c := t.TrainingContainer()
	if c == nil {
		return false
	}
	if v := podspec.VolumeNamed(t.Spec, contract.AgentVolumeName); v != nil && v.EmptyDir == nil {
		t.Warnf("volume %q exists and is not an emptyDir; checkpoint preStop hook not injected (rename your volume)", contract.AgentVolumeName)
		return false
	}
	command, ok := preStopCommand(t, c)
	if !ok {
		return false
	}
	if podspec.VolumeNamed(t.Spec, contract.AgentVolumeName) == nil {
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: contract.AgentVolumeName,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	ensureInstaller(t)
	if !podspec.MountsVolume(c, contract.AgentVolumeName) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: contract.AgentVolumeName, MountPath: t.Policy.AgentPath, ReadOnly: true})
	}
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	c.Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: command}}
	raiseGracePeriod(t)
	ensureCheckpointEnv(t, c)
	return true
}

// preStopCommand builds the agent's command line with the user's hook
// chained. ok is false when the existing hook cannot be chained; the user's
// hook is then left alone and a warning explains why.
func preStopCommand(t *Target, c *corev1.Container) ([]string, bool) {
	agent := t.Policy.AgentBinary()
	cmd := []string{agent, "prestop", "--timeout=" + contract.FormatDuration(t.Policy.PreStopTimeout)}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return cmd, true
	}
	hook := c.Lifecycle.PreStop
	switch {
	case hook.Exec != nil:
		if len(hook.Exec.Command) > 0 && hook.Exec.Command[0] == agent {
			// Already ours (reinvocation): keep it exactly as it is.
			return hook.Exec.Command, true
		}
		return append(append(cmd, "--"), hook.Exec.Command...), true
	case hook.HTTPGet != nil:
		url, err := httpGetURL(hook.HTTPGet, c)
		if err != nil {
			t.Warnf("container %q: cannot chain its preStop httpGet hook (%v); checkpoint preStop hook not injected, your hook is kept", c.Name, err)
			return nil, false
		}
		cmd = append(cmd, "--then-http-get="+url)
		for _, h := range hook.HTTPGet.HTTPHeaders {
			cmd = append(cmd, "--then-http-header="+h.Name+": "+h.Value)
		}
		return cmd, true
	case hook.Sleep != nil:
		return append(cmd, "--then-sleep="+strconv.FormatInt(hook.Sleep.Seconds, 10)+"s"), true
	default:
		t.Warnf("container %q has a preStop hook trainguard cannot chain (only exec, httpGet and sleep); checkpoint preStop hook not injected, your hook is kept", c.Name)
		return nil, false
	}
}

// httpGetURL turns a kubelet httpGet action into the URL the agent calls
// from inside the pod, where the pod's own address is loopback.
func httpGetURL(h *corev1.HTTPGetAction, c *corev1.Container) (string, error) {
	port, err := resolvePort(h.Port, c)
	if err != nil {
		return "", err
	}
	scheme := strings.ToLower(string(h.Scheme))
	switch scheme {
	case "", "http":
		scheme = "http"
	default:
		// The agent speaks plain HTTP only (TLS would double its size); a
		// hook it cannot run must stay the user's, not be dropped.
		return "", fmt.Errorf("scheme %s is not supported by trainguard-agent (plain HTTP only)", h.Scheme)
	}
	host := h.Host
	if host == "" {
		host = "127.0.0.1"
	}
	path := h.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return fmt.Sprintf("%s://%s:%d%s", scheme, host, port, path), nil
}

func resolvePort(p intstr.IntOrString, c *corev1.Container) (int32, error) {
	if p.Type == intstr.Int {
		if p.IntVal < 1 || p.IntVal > 65535 {
			return 0, fmt.Errorf("port %d is out of range", p.IntVal)
		}
		return p.IntVal, nil
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return int32(n), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("named port %q is not declared in the container's ports", p.StrVal)
}

// ensureInstaller adds (or corrects) the init container that copies the agent.
func ensureInstaller(t *Target) {
	want := corev1.Container{
		Name:            contract.AgentInitContainerName,
		Image:           t.Policy.AgentImage,
		ImagePullPolicy: t.Policy.AgentPullPolicy,
		Command:         append(append([]string{}, t.Policy.AgentInstall...), t.Policy.AgentPath),
		VolumeMounts:    []corev1.VolumeMount{{Name: contract.AgentVolumeName, MountPath: t.Policy.AgentPath}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: restrictedSecurityContext(),
	}
	for i := range t.Spec.InitContainers {
		if t.Spec.InitContainers[i].Name == contract.AgentInitContainerName {
			return
		}
	}
	t.Spec.InitContainers = append(t.Spec.InitContainers, want)
}

// restrictedSecurityContext gives the installer nothing it does not need.
func restrictedSecurityContext() *corev1.SecurityContext {
	no, yes := false, true
	// runAsNonRoot is left to the pod: a pod that runs as root would make
	// the kubelet refuse an installer that demands non-root.
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// raiseGracePeriod makes the grace period cover the hook's timeout plus the
// margin the trainer needs to exit. It never lowers a longer period.
func raiseGracePeriod(t *Target) {
	need := int64(math.Ceil((t.Policy.PreStopTimeout + t.Policy.GracePeriodMargin).Seconds()))
	current := int64(kubeletDefaultGracePeriod)
	if t.Spec.TerminationGracePeriodSeconds != nil {
		current = *t.Spec.TerminationGracePeriodSeconds
	}
	if current < need {
		current = need
	}
	if t.Spec.TerminationGracePeriodSeconds == nil || *t.Spec.TerminationGracePeriodSeconds != current {
		t.Spec.TerminationGracePeriodSeconds = &current
	}
}
