// Command demo is `make demo`: it starts etcd and kube-apiserver on loopback
// (envtest, with the binaries in bin/k8s), installs the PyTorchJob and
// Kubeflow Trainer CRDs and trainguard's webhook configurations rendered
// from the Helm chart (Trainer entries on), runs the
// real `bin/trainguard serve` as a child process, applies the objects in
// examples/demo and prints what trainguard injected into each and what it
// refused. It exits 0 only if every valid object was admitted and injected
// and every invalid one was refused, so it doubles as a smoke test.
//
// Serving certificates: envtest generates a CA and a serving certificate for
// 127.0.0.1 and puts the CA into the webhook configurations it registers;
// trainguard serves with that certificate (--cert-dir).
//
// DEMO_KEEP=1 (or --keep) leaves everything running until Ctrl-C and prints
// a kubeconfig for kubectl. Ctrl-C always tears everything down.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// exitInterrupted is returned when Ctrl-C (or SIGTERM) ended the demo early.
const exitInterrupted = 130

type options struct {
	root       string
	trainguard string
	examples   string
	config     string
	keep       bool
	out        io.Writer
}

func main() {
	ctrllog.SetLogger(logr.Discard()) // envtest logs through controller-runtime; keep the output readable.
	o := options{out: os.Stdout}
	flag.StringVar(&o.trainguard, "trainguard", "", "trainguard binary to run (default <repo>/bin/trainguard)")
	flag.StringVar(&o.examples, "examples", "", "directory of the objects to apply, in file name order (default <repo>/examples/demo)")
	flag.StringVar(&o.config, "config", "", "policy file for trainguard serve (default <repo>/examples/config.yaml)")
	flag.BoolVar(&o.keep, "keep", envBool("DEMO_KEEP"), "keep the control plane and trainguard running until Ctrl-C (default $DEMO_KEEP)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, o)
	stop()
	os.Exit(code)
}

func envBool(name string) bool {
	b, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && b
}

// run returns the process exit code; every resource it starts is released
// by its defers before it returns.
func run(ctx context.Context, o options) (code int) {
	start := time.Now()
	var tg *controlplane.Process // for its log on failures
	fail := func(format string, args ...any) int {
		if ctx.Err() != nil {
			fmt.Fprintln(o.out, "\ninterrupted: cleaning up")
			return exitInterrupted
		}
		tg.DumpLog(o.out)
		fmt.Fprintf(o.out, "\ndemo FAILED: "+format+"\n", args...)
		return 1
	}
	if err := o.resolve(); err != nil {
		return fail("%v", err)
	}
	docs, err := loadExamples(o.examples)
	if err != nil {
		return fail("%v", err)
	}
	work, err := os.MkdirTemp("", "trainguard-demo-")
	if err != nil {
		return fail("%v", err)
	}
	defer func() { _ = os.RemoveAll(work) }() // best-effort cleanup of a temp dir

	fmt.Fprintln(o.out, "==> starting etcd and kube-apiserver on 127.0.0.1 (bin/k8s), installing CRDs and trainguard's webhook configurations")
	env, err := startEnv(ctx, o, work)
	if env != nil {
		tg = env.tg
		defer func() {
			fmt.Fprintln(o.out, "==> tearing down trainguard, kube-apiserver and etcd")
			env.stop()
		}()
	}
	if err != nil {
		return fail("%v", err)
	}

	fmt.Fprintf(o.out, "==> applying %d objects from %s\n", len(docs), rel(o.root, o.examples))
	results, err := apply(ctx, env, docs)
	if err != nil {
		return fail("%v", err)
	}
	fmt.Fprintln(o.out)
	problems := printSummary(o.out, results)
	if ctx.Err() != nil {
		return fail("interrupted")
	}
	if len(problems) > 0 {
		return fail("%s", strings.Join(problems, "; "))
	}
	fmt.Fprintf(o.out, "demo OK (%s)\n", time.Since(start).Round(100*time.Millisecond))

	if o.keep {
		fmt.Fprintf(o.out, `
DEMO_KEEP: everything stays up until Ctrl-C.
  kubeconfig:     %s
  trainguard log: %s
  try:            kubectl --kubeconfig %s -n %s get pytorchjobs.kubeflow.org,pytorchjobs.training.kubedl.io,trainjobs,pods -o yaml
`, env.kubeconfig, env.tg.LogPath, env.kubeconfig, demoNamespace(results))
		select {
		case <-ctx.Done():
		case <-env.tg.Done:
			return fail("trainguard exited unexpectedly: %v", env.tg.Err)
		}
		fmt.Fprintln(o.out)
	}
	return 0
}

// resolve fills in the default paths relative to the repository root.
func (o *options) resolve() error {
	root, err := chart.RepoRoot()
	if err != nil {
		return err
	}
	o.root = root
	def := func(p *string, d string) {
		if *p == "" {
			*p = filepath.Join(root, d)
		}
		*p, _ = filepath.Abs(*p)
	}
	def(&o.trainguard, "bin/trainguard")
	def(&o.examples, "examples/demo")
	def(&o.config, "examples/config.yaml")
	if _, err := os.Stat(o.trainguard); err != nil {
		return fmt.Errorf("trainguard binary not found (run `make build`): %w", err)
	}
	if _, err := os.Stat(o.config); err != nil {
		return fmt.Errorf("policy file: %w", err)
	}
	return nil
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
