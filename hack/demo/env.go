package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// env is the running demo: control plane, trainguard and a client.
type env struct {
	cp         *controlplane.ControlPlane
	tg         *trainguardProc
	kubeconfig string
	dyn        dynamic.Interface
	mapper     *restmapper.DeferredDiscoveryRESTMapper
	warnings   *controlplane.Warnings
}

// startEnv boots the control plane and trainguard. On error the returned
// env (if not nil) still holds what was started and must be stopped.
func startEnv(ctx context.Context, o options, work string) (*env, error) {
	type started struct {
		cp  *controlplane.ControlPlane
		err error
	}
	// controlplane.Start does not take a context: run it aside so Ctrl-C
	// is noticed, and stop what it started once it returns.
	ch := make(chan started, 1)
	go func() {
		// Trainer's webhook entries too: examples/demo has TrainJobs.
		cp, err := controlplane.Start(controlplane.Options{ChartValues: []string{"trainer.enabled=true"}})
		if err == nil {
			err = installTrainerCRDs(cp)
		}
		ch <- started{cp, err}
	}()
	var s started
	select {
	case s = <-ch:
	case <-ctx.Done():
		s = <-ch
		if s.cp != nil {
			_ = s.cp.Stop()
		}
		return nil, ctx.Err()
	}
	if s.err != nil {
		return nil, s.err
	}
	e := &env{cp: s.cp}
	if err := ctx.Err(); err != nil {
		return e, err
	}

	user, err := e.cp.Env.AddUser(envtest.User{Name: "demo", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return e, fmt.Errorf("adding the demo user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return e, fmt.Errorf("writing kubeconfig: %w", err)
	}
	e.kubeconfig = filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(e.kubeconfig, kc, 0o600); err != nil {
		return e, err
	}

	wio := e.cp.Env.WebhookInstallOptions
	fmt.Fprintf(o.out, "==> starting %s serve (webhook on :%d, certificates from envtest's CA in %s)\n",
		rel(o.root, o.trainguard), wio.LocalServingPort, wio.LocalServingCertDir)
	e.tg, err = startTrainguard(ctx, o, work, e.kubeconfig, wio.LocalServingCertDir, wio.LocalServingPort)
	if err != nil {
		return e, err
	}
	fmt.Fprintf(o.out, "    trainguard serve is ready (pid %d, log %s)\n", e.tg.cmd.Process.Pid, e.tg.logPath)

	cfg, warnings := controlplane.WithWarnings(user.Config())
	e.warnings = warnings
	if e.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return e, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return e, err
	}
	e.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return e, nil
}

// installTrainerCRDs installs Kubeflow Trainer's and JobSet's CRDs (the
// releases the chart is tested with, from the Go module cache) before
// trainguard starts, so it serves their kinds. No Trainer controller runs.
func installTrainerCRDs(cp *controlplane.ControlPlane) error {
	all, err := chart.WorkloadCRDs()
	if err != nil {
		return err
	}
	var paths []string
	for _, p := range all {
		if base := filepath.Base(p); strings.HasPrefix(base, "trainer.kubeflow.org_") || strings.HasPrefix(base, "jobset.") {
			paths = append(paths, p)
		}
	}
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{ErrorIfPathMissing: true, Paths: paths}); err != nil {
		return fmt.Errorf("installing the Trainer and JobSet CRDs: %w", err)
	}
	return nil
}

func (e *env) stop() {
	if e.tg != nil {
		e.tg.stop()
	}
	if e.cp != nil {
		_ = e.cp.Stop()
	}
}

// trainguardProc is `trainguard serve` running as a child process in its
// own process group.
type trainguardProc struct {
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	// done is closed when the child has exited; err is then its Wait error.
	done chan struct{}
	err  error
	once sync.Once
}

func startTrainguard(ctx context.Context, o options, work, kubeconfig, certDir string, port int) (*trainguardProc, error) {
	probePort, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(work, "trainguard.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.trainguard, "serve",
		"--config", o.config,
		"--cert-dir", certDir,
		"--webhook-port", strconv.Itoa(port),
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(probePort),
		"--namespace", controlplane.Namespace,
	)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close() // the start error is the one to report
		return nil, fmt.Errorf("starting %s: %w", o.trainguard, err)
	}
	p := &trainguardProc{cmd: cmd, logPath: logPath, log: logFile, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	err = p.waitReady(ctx, probePort)
	return p, err
}

func (p *trainguardProc) waitReady(ctx context.Context, probePort int) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	client := &http.Client{Timeout: time.Second}
	deadline := time.After(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close() // drained above; nothing more to read
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("trainguard serve exited before it was ready: %v", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("trainguard serve not ready on %s within 60s", url)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM to the child's process group, then SIGKILL after 15s.
func (p *trainguardProc) stop() {
	p.once.Do(func() {
		defer func() { _ = p.log.Close() }() // the process wrote its last line; the log is only read after this
		pgid := p.cmd.Process.Pid
		// Signal the group even if the child is gone, in case it left
		// anything behind; ESRCH is fine.
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	})
}

// dumpLog prints the end of trainguard's log, for failures.
func (p *trainguardProc) dumpLog(w io.Writer) {
	if p == nil {
		return
	}
	data, err := os.ReadFile(p.logPath)
	if err != nil || len(data) == 0 {
		return
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	fmt.Fprintf(w, "---- last lines of trainguard's log (%s) ----\n", p.logPath)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, "----")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }() // only the port number was wanted
	return l.Addr().(*net.TCPAddr).Port, nil
}
