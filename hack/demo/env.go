package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	tg         *controlplane.Process
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
	fmt.Fprintf(o.out, "    trainguard serve is ready (pid %d, log %s)\n", e.tg.Cmd.Process.Pid, e.tg.LogPath)

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
		e.tg.Stop()
	}
	if e.cp != nil {
		_ = e.cp.Stop()
	}
}

func startTrainguard(ctx context.Context, o options, work, kubeconfig, certDir string, port int) (*controlplane.Process, error) {
	probePort, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	p, err := controlplane.StartProcess(o.trainguard, []string{"serve",
		"--config", o.config,
		"--cert-dir", certDir,
		"--webhook-port", strconv.Itoa(port),
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(probePort),
		"--namespace", controlplane.Namespace,
	}, []string{"KUBECONFIG=" + kubeconfig}, filepath.Join(work, "trainguard.log"))
	if err != nil {
		return nil, err
	}
	err = p.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort), 60*time.Second)
	return p, err
}
