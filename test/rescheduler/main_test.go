// Package rescheduler holds the rescheduler's integration tests (issue 7
// acceptance): a real kube-apiserver and etcd, trainguard's real manager,
// and the kubelet simulated by writing Node and Pod status through the
// status subresource.
//
// Each trainguard manager runs in its own process: the test binary re-runs
// itself in "manager mode" (see runManager). controller-runtime refuses a
// second controller with the same name in one process, and the leader
// election test needs two replicas anyway; a process per replica is also
// what a Deployment runs. The shared manager serves the webhook port the
// API server calls; tests that need other options swap it out.
package rescheduler

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/test/controlplane"
)

// managerEnv names the file holding a manager process's configuration (JSON managerConfig).
const managerEnv = "TRAINGUARD_RESCHEDULER_IT_MANAGER"

// keepLogsEnv, when set, keeps the managers' logs even when every test passes.
const keepLogsEnv = "TRAINGUARD_IT_KEEP_LOGS"

// Short timings, so the whole package runs in well under 90s.
const (
	testNodeLostGrace = 2 * time.Second
	testBackoffBase   = 100 * time.Millisecond
	testBackoffMax    = 200 * time.Millisecond
)

// defaultOptions are the shared manager's rescheduler options.
func defaultOptions() resched.Options {
	o := resched.DefaultOptions()
	o.NodeLostGrace.Duration = testNodeLostGrace
	o.BackoffBase.Duration = testBackoffBase
	o.BackoffMax.Duration = testBackoffMax
	o.BadNodeTTL.Duration = 10 * time.Minute
	// Many tests act on many nodes in quick succession; the rate limit has
	// its own test (TestPartitionBrakeAndNodeRate).
	o.NodeEvictionRate, o.NodeEvictionBurst = ptr.To(float64(1000)), 1000
	o.RetryEvictionRate, o.RetryEvictionBurst = ptr.To(float64(1000)), 1000
	// Nodes and Leases other tests left dead stay in the one cluster the
	// package shares; the cluster brake has its own test (TestStaleLeaseView).
	o.UnhealthyClusterThreshold = 1
	return o
}

// suite is the package's fixture: one control plane, one shared manager.
type suite struct {
	cp *controlplane.ControlPlane
	// c talks to the API server as the tests (the "kubelet", the "operator").
	c client.WithWatch
	// dir holds the managers' logs; kept when a test fails.
	dir    string
	shared *manager
}

var env suite // TestMain's fixture, shared by every test in the package.

// childModes lets build-tagged files add process modes of their own (the
// RSS benchmark's manager); a mode returns ok when its environment asked
// for it.
var childModes []func() (code int, ok bool) // set by init() of tagged files.

func TestMain(m *testing.M) {
	if cfgPath := os.Getenv(managerEnv); cfgPath != "" {
		os.Exit(runManager(cfgPath))
	}
	for _, mode := range childModes {
		if code, ok := mode(); ok {
			os.Exit(code)
		}
	}
	os.Exit(controlplane.RunSuite("rescheduler integration suite", m, run))
}

func run(m *testing.M) (code int, err error) {
	dir, err := os.MkdirTemp("", "trainguard-rescheduler-it-")
	if err != nil {
		return 1, err
	}
	defer func() {
		if code == 0 && os.Getenv(keepLogsEnv) == "" {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stderr, "manager logs kept in", dir)
		}
	}()
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return 1, err
	}
	defer func() { _ = cp.Stop() }()
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 200, 400 // the tests poll
	c, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		return 1, err
	}
	env = suite{cp: cp, c: c, dir: dir}
	// Before trainguard starts, as in a cluster where Trainer is installed
	// first: the pod webhook then recognises TrainJob pods.
	if err := cp.InstallTrainJobCRDs(); err != nil {
		return 1, err
	}
	// trainguard's own namespace: its records live there.
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controlplane.Namespace}}); err != nil {
		return 1, fmt.Errorf("creating %s: %w", controlplane.Namespace, err)
	}
	shared, err := env.startManager(managerOptions{Rescheduler: defaultOptions()})
	if err != nil {
		return 1, err
	}
	env.shared = shared
	code = m.Run()
	if env.shared != nil {
		// A manager that exits non-zero (an error, or a data race under
		// -race) fails the suite.
		if err := env.shared.stop(); err != nil {
			return 1, fmt.Errorf("stopping the shared manager: %w; log: %s", err, tail(env.shared.log))
		}
	}
	return code, nil
}

// managerOptions configure one manager process.
type managerOptions struct {
	Rescheduler resched.Options
	LeaderElect bool
	// Port is the webhook port; 0 is the one the API server calls.
	Port int
	// MetricsAddr serves /metrics when set.
	MetricsAddr string
	// ImpersonateUser and ImpersonateGroups, when set, make the manager act
	// as that identity (trainguard's ServiceAccount under the chart's RBAC)
	// instead of the cluster admin.
	ImpersonateUser   string
	ImpersonateGroups []string
	// APIHost, when set, is a plain-HTTP proxy in front of the API server
	// (with the control plane's credentials) the manager talks to instead.
	APIHost string
}

// managerConfig is what a manager process needs to reach the control plane.
type managerConfig struct {
	managerOptions
	Host                        string
	CAData, CertData, KeyData   []byte
	BearerToken                 string
	WebhookHost, WebhookCertDir string
	WebhookPort                 int
}

// manager is a running manager process.
type manager struct {
	name string
	// metricsAddr serves the manager's /metrics.
	metricsAddr string
	cmd         *exec.Cmd
	log         string
	done        chan error
	once        sync.Once
	err         error
}

var managerCount atomic.Int64 // unique manager log names.

// startManager runs a manager process and waits until it serves TLS.
func (s *suite) startManager(o managerOptions) (*manager, error) {
	wio := s.cp.Env.WebhookInstallOptions
	cfg := managerConfig{
		managerOptions: o,
		Host:           s.cp.Config.Host,
		CAData:         s.cp.Config.CAData,
		CertData:       s.cp.Config.CertData,
		KeyData:        s.cp.Config.KeyData,
		BearerToken:    s.cp.Config.BearerToken,
		WebhookHost:    wio.LocalServingHost,
		WebhookPort:    wio.LocalServingPort,
		WebhookCertDir: wio.LocalServingCertDir,
	}
	if o.Port != 0 {
		cfg.WebhookPort = o.Port
	}
	if o.APIHost != "" {
		cfg.Host, cfg.CAData, cfg.CertData, cfg.KeyData, cfg.BearerToken = o.APIHost, nil, nil, nil, ""
	}
	if cfg.MetricsAddr == "" {
		addr, err := controlplane.FreeAddr()
		if err != nil {
			return nil, err
		}
		cfg.MetricsAddr = addr
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("manager-%d", managerCount.Add(1))
	// A file, not the environment: it holds the control plane's client key.
	cfgPath := filepath.Join(s.dir, name+".json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(s.dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), managerEnv+"="+cfgPath)
	cmd.Stderr = logFile
	// The manager must not outlive the suite, even if the suite is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &manager{name: name, cmd: cmd, log: logPath, metricsAddr: cfg.MetricsAddr, done: make(chan error, 1)}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == readyLine {
				ready <- nil
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		m.done <- cmd.Wait()
	}()
	select {
	case <-ready:
		return m, nil
	case err := <-m.done:
		return nil, fmt.Errorf("%s exited while starting (%v); log: %s", name, err, tail(logPath))
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s not serving within 60s; log: %s", name, tail(logPath))
	}
}

// stop stops the manager gracefully (it releases its lease) and waits.
// Stopping twice is a no-op.
func (m *manager) stop() error {
	m.once.Do(func() {
		if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			m.err = err
			return
		}
		select {
		case m.err = <-m.done:
		case <-time.After(30 * time.Second):
			_ = m.cmd.Process.Kill()
			m.err = fmt.Errorf("%s did not stop within 30s", m.name)
		}
	})
	return m.err
}

// logText is what the manager logged so far.
func (m *manager) logText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(m.log)
	require.NoError(t, err)
	return string(b)
}

// decisionsAbout counts the manager's `rescheduler decision` log lines about a pod.
func (m *manager) decisionsAbout(t *testing.T, namespace, pod string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(m.logText(t), "\n") {
		if strings.Contains(line, `"msg":"rescheduler decision"`) && strings.Contains(line, fmt.Sprintf(`"pod":"%s/%s"`, namespace, pod)) {
			n++
		}
	}
	return n
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// replaceShared stops the shared manager for the rest of the test; it is
// started again, with the default options, when the test ends.
func (s *suite) replaceShared(t *testing.T) {
	t.Helper()
	require.NotNil(t, s.shared, "the shared manager is running")
	require.NoError(t, s.shared.stop(), "the shared manager exits cleanly; log: %s", s.shared.log)
	s.shared = nil
	t.Cleanup(func() {
		m, err := s.startManager(managerOptions{Rescheduler: defaultOptions()})
		require.NoError(t, err, "restarting the shared manager")
		s.shared = m
	})
}

// startManagerForTest starts a manager that is stopped when the test ends.
func (s *suite) startManagerForTest(t *testing.T, o managerOptions) *manager {
	t.Helper()
	m, err := s.startManager(o)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.stop(), "%s exits cleanly; log: %s", m.name, m.log) })
	return m
}

const readyLine = "TRAINGUARD-MANAGER-READY"

// runManager is the manager process: trainguard's real manager, started the
// way controlplane.StartTrainguard starts it, until SIGTERM.
func runManager(cfgPath string) int {
	logger := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{LogTimestamp: true})
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	var cfg managerConfig
	raw, err := os.ReadFile(cfgPath)
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "decoding manager config:", err)
		return 2
	}
	restCfg := &rest.Config{
		Host:            cfg.Host,
		BearerToken:     cfg.BearerToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData, CertData: cfg.CertData, KeyData: cfg.KeyData},
		Impersonate:     rest.ImpersonationConfig{UserName: cfg.ImpersonateUser, Groups: cfg.ImpersonateGroups},
	}
	cp := &controlplane.ControlPlane{
		Env: &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
			LocalServingHost: cfg.WebhookHost, LocalServingPort: cfg.WebhookPort, LocalServingCertDir: cfg.WebhookCertDir,
		}},
		Config: restCfg,
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	opts := cfg.Rescheduler
	tg, err := cp.StartTrainguard(ctx, controlplane.TrainguardOptions{Rescheduler: &opts, LeaderElect: cfg.LeaderElect, Port: cfg.WebhookPort,
		MetricsAddr: cfg.MetricsAddr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting trainguard:", err)
		return 1
	}
	fmt.Println(readyLine)
	<-ctx.Done()
	if err := tg.Stop(); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "stopping trainguard:", err)
		return 1
	}
	return 0
}
