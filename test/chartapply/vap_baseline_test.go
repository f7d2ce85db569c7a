package chartapply

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// createdPodCase is a pod trainguard's account might create (a marked pod
// with one change), what Pod Security's baseline says of it, and what the
// fence does.
type createdPodCase struct {
	what   string
	change func(p *corev1.Pod)
	// baseline: the real Pod Security admission, enforcing baseline,
	// refuses it. fenced: the fence refuses it to trainguard's account
	// whatever the namespace enforces (every baseline refusal, and a few
	// more); item is what the refusal names.
	baseline, fenced bool
	item             string
}

// linuxCapabilities are every capability the kernel knows (capabilities(7)),
// as a pod names them, plus spellings a runtime would accept too.
var linuxCapabilities = []string{
	"AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE", "CHOWN",
	"DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE",
	"LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST",
	"NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYSLOG", "SYS_ADMIN", "SYS_BOOT",
	"SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME",
	"SYS_TTY_CONFIG", "WAKE_ALARM", "ALL", "CAP_SYS_ADMIN", "sys_admin",
}

// baselineCapabilities and baselineSysctls are Pod Security's allowed sets
// (k8s.io/pod-security-admission, Kubernetes 1.37), written out here so a
// change to the fence's lists must be made twice to pass.
var (
	baselineCapabilities = []string{
		"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
		"SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
	}
	baselineSysctls = []string{
		"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
		"net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem",
		"net.ipv4.tcp_wmem", "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat",
	}
)

func containerSC(sc *corev1.SecurityContext) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = sc }
}

func initContainerSC(sc *corev1.SecurityContext) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "example.com/setup:1", SecurityContext: sc}}
	}
}

func podSC(sc *corev1.PodSecurityContext) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.SecurityContext = sc }
}

func podAnnotation(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[k] = v }
}

func createdPodCases() []createdPodCase {
	unmasked, def := corev1.UnmaskedProcMount, corev1.DefaultProcMount
	httpHost := &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}
	cases := []createdPodCase{
		{what: "hostNetwork", change: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, baseline: true, fenced: true, item: "spec.hostNetwork"},
		{what: "hostPID", change: func(p *corev1.Pod) { p.Spec.HostPID = true }, baseline: true, fenced: true, item: "spec.hostPID"},
		{what: "hostIPC", change: func(p *corev1.Pod) { p.Spec.HostIPC = true }, baseline: true, fenced: true, item: "spec.hostIPC"},
		{what: "a privileged container", change: containerSC(&corev1.SecurityContext{Privileged: ptr.To(true)}),
			baseline: true, fenced: true, item: "container pytorch privileged"},
		{what: "a privileged init container", change: initContainerSC(&corev1.SecurityContext{Privileged: ptr.To(true)}),
			baseline: true, fenced: true, item: "container setup privileged"},
		{what: "a hostPath volume", change: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, baseline: true, fenced: true, item: "hostPath volume root"},
		{what: "NET_ADMIN in an init container", change: initContainerSC(&corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}), baseline: true, fenced: true, item: "container setup capabilities.add NET_ADMIN"},
		{what: "a host port", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 29500, HostPort: 29500}}
		}, baseline: true, fenced: true, item: "container pytorch hostPort"},
		{what: "a host port on an init container", change: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "example.com/setup:1", Ports: []corev1.ContainerPort{{ContainerPort: 22, HostPort: 2222}}}}
		}, baseline: true, fenced: true, item: "container setup hostPort"},
		{what: "a container port only", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 29500}}
		}},
		{what: "seccomp Unconfined (pod)", change: podSC(&corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}),
			baseline: true, fenced: true, item: "spec.securityContext.seccompProfile.type Unconfined"},
		{what: "seccomp Unconfined (container)", change: containerSC(&corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}),
			baseline: true, fenced: true, item: "container pytorch seccompProfile.type Unconfined"},
		{what: "seccomp Unconfined (init container)", change: initContainerSC(&corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}),
			baseline: true, fenced: true, item: "container setup seccompProfile.type Unconfined"},
		{what: "seccomp RuntimeDefault", change: podSC(&corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}})},
		{what: "seccomp Localhost", change: containerSC(&corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{
			Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/train.json")}})},
		{what: "the deprecated seccomp annotation unconfined", change: podAnnotation("seccomp.security.alpha.kubernetes.io/pod", "unconfined"),
			fenced: true, item: "annotation seccomp.security.alpha.kubernetes.io/pod: unconfined"},
		{what: "AppArmor Unconfined (pod)", change: podSC(&corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}),
			baseline: true, fenced: true, item: "spec.securityContext.appArmorProfile.type Unconfined"},
		{what: "AppArmor Unconfined (container)", change: containerSC(&corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}),
			baseline: true, fenced: true, item: "container pytorch appArmorProfile.type Unconfined"},
		{what: "AppArmor unconfined by annotation", change: podAnnotation("container.apparmor.security.beta.kubernetes.io/pytorch", "unconfined"),
			baseline: true, fenced: true, item: "annotation container.apparmor.security.beta.kubernetes.io/pytorch: unconfined"},
		{what: "AppArmor localhost by annotation", change: podAnnotation("container.apparmor.security.beta.kubernetes.io/pytorch", "localhost/train")},
		{what: "AppArmor RuntimeDefault", change: containerSC(&corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}})},
		{what: "SELinux spc_t (pod)", change: podSC(&corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}}),
			baseline: true, fenced: true, item: "spec.securityContext.seLinuxOptions"},
		{what: "SELinux spc_t (container)", change: containerSC(&corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}}),
			baseline: true, fenced: true, item: "container pytorch seLinuxOptions"},
		{what: "SELinux user", change: containerSC(&corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{User: "system_u"}}),
			baseline: true, fenced: true, item: "container pytorch seLinuxOptions"},
		{what: "SELinux role", change: podSC(&corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Role: "system_r"}}),
			baseline: true, fenced: true, item: "spec.securityContext.seLinuxOptions"},
		{what: "SELinux container_t", change: containerSC(&corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c1,c2"}})},
		{what: "SELinux container_engine_t", change: podSC(&corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "container_engine_t"}})},
		// The API server takes an unmasked /proc only in a user namespace,
		// where baseline (1.35+) allows it; the fence refuses it there too.
		{what: "/proc unmasked in a user namespace", change: func(p *corev1.Pod) {
			p.Spec.HostUsers = ptr.To(false)
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: &unmasked}
		}, fenced: true, item: "container pytorch procMount Unmasked"},
		{what: "/proc Default", change: containerSC(&corev1.SecurityContext{ProcMount: &def})},
		{what: "an httpGet liveness probe host", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: httpHost}}
		}, baseline: true, fenced: true, item: "container pytorch probe or lifecycle hook host"},
		{what: "a tcpSocket readiness probe host", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Host: "10.0.0.1", Port: intstr.FromInt32(2379)}}}
		}, baseline: true, fenced: true, item: "container pytorch probe or lifecycle hook host"},
		{what: "a preStop hook host", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: httpHost}}
		}, baseline: true, fenced: true, item: "container pytorch probe or lifecycle hook host"},
		{what: "an httpGet probe without a host", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}}
		}},
		// A pod bound to a node skips the scheduler and its taints (a
		// control-plane node's with a tolerate-all); the rescheduler's
		// replacements never set it.
		{what: "spec.nodeName", change: func(p *corev1.Pod) {
			p.Spec.NodeName = "control-plane-0"
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}, fenced: true, item: "spec.nodeName control-plane-0"},
	}
	for _, c := range linuxCapabilities {
		allowed := slices.Contains(baselineCapabilities, c)
		cases = append(cases, createdPodCase{what: "capability " + c,
			change: containerSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{
				Add: []corev1.Capability{corev1.Capability(c)}, Drop: []corev1.Capability{"ALL"}}}),
			baseline: !allowed, fenced: !allowed, item: "container pytorch capabilities.add " + c})
	}
	for _, s := range append(slices.Clone(baselineSysctls), "kernel.msgmax", "kernel.shmmax", "net.core.somaxconn", "net.ipv4.ip_forward", "vm.swappiness") {
		allowed := slices.Contains(baselineSysctls, s)
		cases = append(cases, createdPodCase{what: "sysctl " + s,
			change:   podSC(&corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: s, Value: "1"}}}),
			baseline: !allowed, fenced: !allowed, item: "sysctl " + s})
	}
	return cases
}

// markedPod is a pod as trainguard's account may create it: its marker,
// one training container, nothing else.
func markedPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:      map[string]string{contract.LabelManaged: "true"},
			Annotations: map[string]string{contract.AnnotationInjected: contract.InjectionPreStop},
		},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}}},
	}
}

// A pod trainguard's account creates is held to Pod Security's baseline,
// whatever the namespace enforces, and may not be bound to a node. Before,
// the fence checked host namespaces, privileged and hostPath only: a stolen
// token could create, in any injected namespace left at Pod Security's
// privileged level, a marked pod with SYS_ADMIN, SYS_MODULE or BPF,
// seccomp or AppArmor unconfined, /proc unmasked, SELinux spc_t, host ports,
// unsafe sysctls, or spec.nodeName on a control-plane node.
//
// Each case is also sent, as the cluster admin, to a namespace enforcing
// baseline: the real Pod Security admission must agree with what the test
// says of it, so the fence's lists are held to baseline's. And the
// rescheduler's view of the same pod (rescheduler.Unrecreatable, which
// decides whether it evicts a bare pod at all) must agree with the fence's
// verdict on the replacement it would create (rescheduler.Replacement).
func TestAdmissionPolicyHoldsCreatedPodsToBaseline(t *testing.T) {
	ctx := context.Background()
	const release, ns, policy = "fencebase", "fencebase-system", "fencebase-trainguard-fence"
	sa := installFence(t, release, ns)
	injected := namespaceWithPod(t, release+"-team", optIn("enabled"))
	waitPolicyActive(t, sa, podIn(t, ns), policy)
	enforcing := namespaceWithPod(t, release+"-baseline", nsMeta{labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}})

	for i, tc := range createdPodCases() {
		t.Run(tc.what, func(t *testing.T) {
			name := fmt.Sprintf("created-%d", i)
			build := func(namespace string) *corev1.Pod {
				p := markedPod(namespace, name)
				tc.change(p)
				return p
			}
			err := apiServer.c.Create(ctx, build(enforcing.Namespace), client.DryRunAll)
			if tc.baseline {
				require.Error(t, err, "Pod Security's baseline refuses %s", tc.what)
				assert.Contains(t, err.Error(), "violates PodSecurity \"baseline:latest\"")
			} else {
				require.NoError(t, err, "Pod Security's baseline admits %s", tc.what)
			}
			// As the cluster admin, in the injected namespace: the API
			// server takes it (the fence is trainguard's account's only)
			// and returns it as stored.
			stored := build(injected.Namespace)
			require.NoError(t, apiServer.c.Create(ctx, stored, client.DryRunAll), "the admin's pod with %s", tc.what)

			err = sa.Create(ctx, build(injected.Namespace), client.DryRunAll)
			if tc.fenced {
				require.True(t, byPolicy(err, policy), "trainguard's account creating a pod with %s must be refused by the fence, got %v", tc.what, err)
				assert.Contains(t, err.Error(), "may create only pods Pod Security's baseline admits")
				assert.Contains(t, err.Error(), tc.item)
			} else {
				assert.NoError(t, err, "trainguard's account may create a pod with %s", tc.what)
			}

			// The rescheduler judges a bare pod before it evicts it: what it
			// would not recreate, it leaves; what it recreates, the fence
			// takes.
			why := rescheduler.Unrecreatable(stored)
			err = sa.Create(ctx, rescheduler.Replacement(stored), client.DryRunAll)
			if why == "" {
				assert.NoError(t, err, "the rescheduler would evict the bare pod with %s and recreate it; the fence must take the replacement", tc.what)
			} else {
				assert.True(t, byPolicy(err, policy), "the rescheduler leaves the bare pod with %s (%s); the fence must refuse its replacement, got %v", tc.what, why, err)
			}
		})
	}
}

// What the webhook injects into a pod (the agent's init container with a
// restricted security context, its volumes, the TaskD and TTP container
// ports, the restart rules) passes the fence: the replacement of every
// injected pod of the golden files is created by trainguard's account.
func TestAdmissionPolicyTakesTheReplacementOfEveryInjectedPod(t *testing.T) {
	ctx := context.Background()
	const release, ns, policy = "fencegold", "fencegold-system", "fencegold-trainguard-fence"
	sa := installFence(t, release, ns)
	injected := namespaceWithPod(t, release+"-team", optIn("enabled"))
	waitPolicyActive(t, sa, podIn(t, ns), policy)

	files, err := filepath.Glob(filepath.Join("..", "..", "webhook", "testdata", "*.out.yaml"))
	require.NoError(t, err)
	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var pod corev1.Pod
			if err := dec.Decode(&pod); err != nil {
				break
			}
			if pod.Kind != "Pod" || !contract.Injected(pod.Annotations) {
				continue
			}
			n++
			t.Run(filepath.Base(f)+"/"+pod.Name, func(t *testing.T) {
				pod.Namespace, pod.OwnerReferences = injected.Namespace, nil
				require.NoError(t, apiServer.c.Create(ctx, &pod, client.DryRunAll), "the admin creates the injected pod")
				assert.Empty(t, rescheduler.Unrecreatable(&pod), "the rescheduler would recreate it")
				err := sa.Create(ctx, rescheduler.Replacement(&pod), client.DryRunAll)
				assert.NoError(t, err, "trainguard's account recreates it")
				if err != nil {
					assert.False(t, strings.Contains(err.Error(), policy), "refused by the fence")
				}
			})
		}
	}
	assert.GreaterOrEqual(t, n, 5, "the golden files hold injected pods")
}
