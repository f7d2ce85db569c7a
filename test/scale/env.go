// Package scale is the harness behind `make scale` (issue 34): a real
// kube-apiserver and etcd (test/controlplane), nodes and pods simulated by
// KWOK (its controller keeps the node Leases and pod status), kubeflow's
// PyTorchJob CRD, and trainguard's real binary run as a process with the
// chart's configuration and arguments. Scenarios measure steady state,
// a zone outage, a control-plane stall and exit churn; each prints its
// figures. The 200-node smoke run in smoke_test.go asserts the stall takes
// no action and the outage decides every affected pod.
package scale

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// KWOKVersion is the KWOK controller the Makefile builds into bin/.
const KWOKVersion = "v0.8.0"

// zoneLabel is where the rescheduler's zone brake reads a node's zone.
const zoneLabel = "topology.kubernetes.io/zone"

// kwokGroupLabel splits the nodes between the KWOK instances: the outage
// zone's own instance ("outage") and one for every other zone ("rest"), so
// stopping one process silences exactly that zone's Leases.
const kwokGroupLabel = "scale.trainguard.io/kwok"

// env is the running harness.
type env struct {
	o          Options
	cp         *controlplane.ControlPlane
	c          client.Client
	cfg        *rest.Config
	kubeconfig string
	tg         *controlplane.Process
	tgArgs     []string
	tgLogs     []string
	tgEnv      []string
	tgMetrics  string
	tgProbe    string
	kwok       map[string]*controlplane.Process
	out        io.Writer
	// patching is the admission scenario's patching no-op.
	patching *controlplane.PatchingNoop
}

func startEnv(ctx context.Context, o Options) (*env, error) {
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return nil, err
	}
	e := &env{o: o, cp: cp, out: o.Out, kwok: map[string]*controlplane.Process{}}
	cfg := rest.CopyConfig(cp.Config)
	// The harness plays every tenant and kubelet at once: never throttle it.
	cfg.QPS, cfg.Burst = 100000, 100000
	e.cfg = cfg
	if e.c, err = client.New(cfg, client.Options{}); err != nil {
		return e, err
	}
	user, err := cp.Env.AddUser(envtest.User{Name: "scale", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return e, fmt.Errorf("adding a user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return e, err
	}
	e.kubeconfig = filepath.Join(o.WorkDir, "kubeconfig")
	if err := os.WriteFile(e.kubeconfig, kc, 0o600); err != nil {
		return e, err
	}
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controlplane.Namespace}}); err != nil {
		return e, err
	}
	if err := e.prepareTrainguard(); err != nil {
		return e, err
	}
	if err := e.startTrainguard(ctx, e.leaseFlags()...); err != nil {
		return e, err
	}
	if err := writeKWOKConfig(filepath.Join(o.WorkDir, "kwok.yaml"), o.Nodes); err != nil {
		return e, err
	}
	for _, g := range []string{"outage", "rest"} {
		if err := e.startKWOK(ctx, g); err != nil {
			return e, err
		}
	}
	return e, nil
}

func (e *env) stop() {
	for _, p := range e.kwok {
		p.Stop()
	}
	if e.tg != nil {
		e.tg.Stop()
	}
	if e.cp != nil {
		_ = e.cp.Stop()
	}
}

// prepareTrainguard renders the chart and takes from it what the pod would
// get: the configuration file, the container's arguments and GOMEMLIMIT
// (the container's memory limit). Only the addresses change (loopback
// ports, envtest's serving certificate) and metrics are plain HTTP so the
// harness can read them.
func (e *env) prepareTrainguard() error {
	objs, err := chart.RenderShipped(controlplane.ReleaseName, controlplane.Namespace)
	if err != nil {
		return err
	}
	cmObj, err := chart.Find(objs, "ConfigMap", controlplane.ReleaseName)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{}
	if err := chart.Into(cmObj, cm); err != nil {
		return err
	}
	cfgPath := filepath.Join(e.o.WorkDir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		return err
	}
	depObj, err := chart.Find(objs, "Deployment", controlplane.ReleaseName)
	if err != nil {
		return err
	}
	dep := &appsv1.Deployment{}
	if err := chart.Into(depObj, dep); err != nil {
		return err
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	metricsPort, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	probePort, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	e.tgMetrics = fmt.Sprintf("127.0.0.1:%d", metricsPort)
	e.tgProbe = fmt.Sprintf("127.0.0.1:%d", probePort)
	wio := e.cp.Env.WebhookInstallOptions
	override := map[string]string{
		"--config":                    cfgPath,
		"--cert-dir":                  wio.LocalServingCertDir,
		"--webhook-port":              strconv.Itoa(wio.LocalServingPort),
		"--metrics-bind-address":      e.tgMetrics,
		"--metrics-secure":            "false",
		"--health-probe-bind-address": e.tgProbe,
	}
	for _, a := range ctr.Args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := override[name]; ok {
			a = name + "=" + v
		}
		e.tgArgs = append(e.tgArgs, a)
	}
	e.tgEnv = []string{"KUBECONFIG=" + e.kubeconfig, "POD_NAMESPACE=" + controlplane.Namespace, "POD_NAME=trainguard-scale-0"}
	lim, ok := ctr.Resources.Limits[corev1.ResourceMemory]
	if e.o.MemoryLimit != "" {
		if lim, err = resource.ParseQuantity(e.o.MemoryLimit); err != nil {
			return fmt.Errorf("-memory-limit: %w", err)
		}
		ok = true
	}
	if ok {
		e.tgEnv = append(e.tgEnv, fmt.Sprintf("GOMEMLIMIT=%d", lim.Value()))
	}
	return nil
}

// startTrainguard runs bin/trainguard with the chart's arguments and extra
// flags (a scenario's deliberate change, printed with its figures).
func (e *env) startTrainguard(ctx context.Context, extra ...string) error {
	root, err := chart.RepoRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(root, "bin", "trainguard")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s not found: run `make build` (make scale does it): %w", bin, err)
	}
	args := append(append([]string{}, e.tgArgs...), extra...)
	n := 0
	if e.tg != nil {
		n = 1
	}
	p, err := controlplane.StartProcess(bin, args, e.tgEnv, filepath.Join(e.o.WorkDir, fmt.Sprintf("trainguard-%d.log", n)))
	if err != nil {
		return err
	}
	e.tg = p
	e.tgLogs = append(e.tgLogs, p.LogPath)
	if err := p.WaitHTTP(ctx, "http://"+e.tgProbe+"/readyz", 5*time.Minute); err != nil {
		p.DumpLog(e.out)
		return err
	}
	return nil
}

// KWOKBin is the KWOK controller's path (bin/kwok-<version>).
func KWOKBin() (string, error) {
	root, err := chart.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "bin", "kwok-"+KWOKVersion)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s not found: run `make kwok` (make scale and make tools do it): %w", bin, err)
	}
	return bin, nil
}

// startKWOK runs one KWOK controller for the nodes labelled with group. Its
// default stages initialise the nodes, renew their Leases every 10 s (a
// 40 s Lease, as the kubelet's), make pods Running and finish deletions.
func (e *env) startKWOK(ctx context.Context, group string) error {
	bin, err := KWOKBin()
	if err != nil {
		return err
	}
	p, err := controlplane.StartProcess(bin, []string{
		"--kubeconfig=" + e.kubeconfig,
		"--config=" + filepath.Join(e.o.WorkDir, "kwok.yaml"),
		"--manage-nodes-with-label-selector=" + kwokGroupLabel + "=" + group,
		"--node-lease-duration-seconds=" + strconv.Itoa(e.kwokLeaseSeconds()),
		// Every pod needs an IP; the default /24 runs out at 254.
		"--cidr=10.0.0.0/8",
		// KWOK logs every Lease renewal at INFO.
		"-v=WARN",
	}, []string{"HOME=" + e.o.WorkDir}, filepath.Join(e.o.WorkDir, "kwok-"+group+".log"))
	if err != nil {
		return err
	}
	e.kwok[group] = p
	select {
	case <-p.Done:
		p.DumpLog(e.out)
		return fmt.Errorf("kwok %s exited: %v", group, p.Err)
	case <-time.After(time.Second):
	}
	_ = ctx
	return nil
}

// kwokStages are KWOK's own stages (from its module): nodes become Ready
// at once and their status is refreshed rarely (the Lease is renewed
// apart from it), pods become Running at once, deletions finish.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// kwokConfiguration raises KWOK's parallelism from its default of 4
// workers each for Lease renewals and pod stages. With 4, a starved API
// server's latency capped KWOK at about 20 pod status patches a second
// (12,000 pods took 9 minutes to become Running after the last create),
// and Lease renewals fell behind: at 1,000 nodes (100 renewals a second
// at the kubelet's 10 s interval) half the Leases looked dead at times,
// which engaged the brakes while every node was meant healthy. The Lease
// workers grow with the nodes so a renewal waits for a free worker no
// longer than for the API server.
func kwokConfiguration(nodes int) string {
	return fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: %d
  podPlayStageParallelism: 32
  nodePlayStageParallelism: 16
`, max(16, nodes/50))
}

// writeKWOKConfig writes KWOK's configuration file: kwokConfiguration and
// the stages.
func writeKWOKConfig(path string, nodes int) error {
	dir, err := chart.ModuleDir("sigs.k8s.io/kwok@" + KWOKVersion)
	if err != nil {
		return err
	}
	var docs []string
	for _, f := range kwokStages {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		doc := string(data)
		if strings.HasSuffix(f, "pod-ready.yaml") {
			// Without pod IPs: trainguard never reads them, and KWOK's
			// template adds a second IP when a stage replays (a status
			// patch merges podIPs by IP), which the API server refuses.
			i, j := strings.Index(doc, "{{ $podIPs"), strings.Index(doc, "      phase: Running")
			if i < 0 || j < i {
				return fmt.Errorf("%s: the pod IP block moved; update writeKWOKConfig", f)
			}
			i = strings.LastIndexByte(doc[:i], '\n') + 1 // from the start of its line
			doc = doc[:i] + doc[j:]
		}
		docs = append(docs, doc)
	}
	docs = append(docs, kwokConfiguration(nodes))
	return os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o600)
}

// kwokLeaseSeconds is the Lease KWOK writes; it renews every quarter of
// it. -lease-seconds where that stays under maxKWOKRenewals a second, else
// the kubelet's 40 s when longer: 5,000 Leases renewed every 10 s are 500
// writes a second, more than this machine's API server can take beside
// everything else. A renewal interval as long as the brakes' silence (half
// of trainguard's --lease-lost-after) made healthy nodes count as silent
// just before each renewal: the smoke run's 20 s bound with 40 s Leases
// renewed every 10 s engaged the cluster brake in the middle of the zone
// outage once KWOK's renewals fell into step after the stall (190 of 200
// nodes "silent" for 10 s), and its release 2 s later restarted the silent
// zone's silence, so the zone brake was not engaged when looked at.
func (e *env) kwokLeaseSeconds() int {
	if e.o.LeaseSeconds > 0 && 4*e.o.Nodes/e.o.LeaseSeconds <= maxKWOKRenewals {
		return e.o.LeaseSeconds
	}
	return max(40, e.o.LeaseSeconds)
}

// maxKWOKRenewals bounds the Lease renewals a second KWOK is given.
const maxKWOKRenewals = 100

// stopKWOK stops one KWOK controller: its nodes' Leases stop.
func (e *env) stopKWOK(group string) {
	if p := e.kwok[group]; p != nil {
		p.Stop()
		delete(e.kwok, group)
	}
}

// optedIn is a tenant namespace trainguard injects.
func optedIn(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{contract.AnnotationInject: contract.InjectEnabled}}}
}
