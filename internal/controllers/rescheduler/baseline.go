package rescheduler

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What the chart's fence (charts/trainguard/templates/admissionpolicy.yaml,
// its variable unconfined) refuses in a pod trainguard's account creates:
// everything Pod Security's baseline refuses (k8s.io/pod-security-admission,
// Kubernetes 1.37), whatever the namespace enforces, and a little more.
// The rescheduler must know it before it evicts a bare pod: a pod the fence
// would not let it recreate is lost once evicted. test/chartapply holds this
// list to the fence, and both to the real Pod Security admission.
var (
	baselineCapabilities = []corev1.Capability{
		"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
		"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
	}
	baselineSysctls = []string{
		"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
		"net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem",
		"net.ipv4.tcp_wmem", "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat",
	}
	baselineSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)

const (
	annotationAppArmorPrefix         = "container.apparmor.security.beta.kubernetes.io/"
	annotationSeccompPod             = "seccomp.security.alpha.kubernetes.io/pod"
	annotationSeccompContainerPrefix = "container.seccomp.security.alpha.kubernetes.io/"
)

// unconfined lists, in the fence's words, what of a pod to be created by
// trainguard's account the fence refuses; empty when nothing. Stricter than
// baseline as the fence is: /proc unmasked is refused in a user namespace
// too, the deprecated seccomp annotations are read, and a pod bound to a
// node (spec.nodeName) is refused.
func unconfined(annotations map[string]string, spec *corev1.PodSpec) []string {
	var why []string
	if spec.HostNetwork {
		why = append(why, "spec.hostNetwork")
	}
	if spec.HostPID {
		why = append(why, "spec.hostPID")
	}
	if spec.HostIPC {
		why = append(why, "spec.hostIPC")
	}
	if spec.NodeName != "" {
		why = append(why, "spec.nodeName "+spec.NodeName)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			why = append(why, "hostPath volume "+v.Name)
		}
	}
	if sc := spec.SecurityContext; sc != nil {
		for _, s := range sc.Sysctls {
			if !slices.Contains(baselineSysctls, s.Name) {
				why = append(why, "sysctl "+s.Name)
			}
		}
		if sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess {
			why = append(why, "spec.securityContext.windowsOptions.hostProcess")
		}
		if sc.SeccompProfile != nil && !confinedSeccomp(sc.SeccompProfile.Type) {
			why = append(why, "spec.securityContext.seccompProfile.type "+string(sc.SeccompProfile.Type))
		}
		if sc.AppArmorProfile != nil && !confinedAppArmor(sc.AppArmorProfile.Type) {
			why = append(why, "spec.securityContext.appArmorProfile.type "+string(sc.AppArmorProfile.Type))
		}
		if !baselineSELinux(sc.SELinuxOptions) {
			why = append(why, "spec.securityContext.seLinuxOptions (a type other than container_t, container_init_t, container_kvm_t, container_engine_t, or a user or role)")
		}
	}
	containers := slices.Concat(spec.Containers, spec.InitContainers)
	for i := range spec.EphemeralContainers {
		containers = append(containers, corev1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	// One pass per item, as the fence lists them.
	for _, check := range []func(c *corev1.Container) string{
		func(c *corev1.Container) string {
			if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				return "privileged"
			}
			return ""
		},
		func(c *corev1.Container) string {
			if sc := c.SecurityContext; sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess {
				return "windowsOptions.hostProcess"
			}
			return ""
		},
		func(c *corev1.Container) string {
			if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
				return ""
			}
			var beyond []string
			for _, a := range c.SecurityContext.Capabilities.Add {
				if !slices.Contains(baselineCapabilities, a) {
					beyond = append(beyond, string(a))
				}
			}
			if len(beyond) == 0 {
				return ""
			}
			return "capabilities.add " + strings.Join(beyond, ", ")
		},
		func(c *corev1.Container) string {
			for _, p := range c.Ports {
				if p.HostPort != 0 {
					return "hostPort"
				}
			}
			return ""
		},
		func(c *corev1.Container) string {
			if sc := c.SecurityContext; sc != nil && sc.SeccompProfile != nil && !confinedSeccomp(sc.SeccompProfile.Type) {
				return "seccompProfile.type " + string(sc.SeccompProfile.Type)
			}
			return ""
		},
		func(c *corev1.Container) string {
			if sc := c.SecurityContext; sc != nil && sc.AppArmorProfile != nil && !confinedAppArmor(sc.AppArmorProfile.Type) {
				return "appArmorProfile.type " + string(sc.AppArmorProfile.Type)
			}
			return ""
		},
		func(c *corev1.Container) string {
			if sc := c.SecurityContext; sc != nil && !baselineSELinux(sc.SELinuxOptions) {
				return "seLinuxOptions"
			}
			return ""
		},
		func(c *corev1.Container) string {
			if sc := c.SecurityContext; sc != nil && sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
				return "procMount " + string(*sc.ProcMount)
			}
			return ""
		},
		func(c *corev1.Container) string {
			hosts := []*corev1.ProbeHandler{}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p != nil {
					hosts = append(hosts, &p.ProbeHandler)
				}
			}
			if l := c.Lifecycle; l != nil {
				for _, h := range []*corev1.LifecycleHandler{l.PostStart, l.PreStop} {
					if h != nil {
						hosts = append(hosts, &corev1.ProbeHandler{HTTPGet: h.HTTPGet, TCPSocket: h.TCPSocket})
					}
				}
			}
			for _, h := range hosts {
				if (h.HTTPGet != nil && h.HTTPGet.Host != "") || (h.TCPSocket != nil && h.TCPSocket.Host != "") {
					return "probe or lifecycle hook host"
				}
			}
			return ""
		},
	} {
		for i := range containers {
			if what := check(&containers[i]); what != "" {
				why = append(why, "container "+containers[i].Name+" "+what)
			}
		}
	}
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := annotations[k]
		switch {
		case strings.HasPrefix(k, annotationAppArmorPrefix) && v != "" && v != "runtime/default" && !strings.HasPrefix(v, "localhost/"):
			why = append(why, "annotation "+k+": "+v)
		case (k == annotationSeccompPod || strings.HasPrefix(k, annotationSeccompContainerPrefix)) &&
			v != "runtime/default" && v != "docker/default" && !strings.HasPrefix(v, "localhost/"):
			why = append(why, "annotation "+k+": "+v)
		}
	}
	return why
}

func confinedSeccomp(t corev1.SeccompProfileType) bool {
	return t == corev1.SeccompProfileTypeRuntimeDefault || t == corev1.SeccompProfileTypeLocalhost
}

func confinedAppArmor(t corev1.AppArmorProfileType) bool {
	return t == corev1.AppArmorProfileTypeRuntimeDefault || t == corev1.AppArmorProfileTypeLocalhost
}

func baselineSELinux(o *corev1.SELinuxOptions) bool {
	return o == nil || (slices.Contains(baselineSELinuxTypes, o.Type) && o.User == "" && o.Role == "")
}
