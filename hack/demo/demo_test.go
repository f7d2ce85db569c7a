package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainguard/trainguard/internal/foundations/objdiff"
	"github.com/trainguard/trainguard/test/chart"
)

// TestDemo is `make demo` end to end: it builds the demo driver, runs it
// against bin/k8s and the real trainguard binary (bin/trainguard, or one
// built here when missing), and checks the exit code, that the summary
// covers every object in examples/demo, the rejection of the invalid one,
// and that trainguard serve did not outlive the demo.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane; skipped with -short")
	}
	root, err := chart.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	trainguard := filepath.Join(root, "bin", "trainguard")
	if _, err := os.Stat(trainguard); err != nil {
		trainguard = filepath.Join(tmp, "trainguard")
		goBuild(t, root, trainguard, "./cmd/trainguard")
	}
	demo := filepath.Join(tmp, "demo")
	goBuild(t, root, demo, "./hack/demo")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, demo, "--trainguard", trainguard, "--keep=false")
	cmd.Dir = root
	start := time.Now()
	outBytes, err := cmd.CombinedOutput()
	out := string(outBytes)
	t.Logf("demo ran in %s", time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
	}
	if !strings.Contains(out, "\ndemo OK") {
		fail("output lacks \"demo OK\"")
	}

	docs, err := loadExamples(filepath.Join(root, "examples", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	summary := out[strings.LastIndex(out, "\nSummary\n"):]
	kinds := map[string]bool{}
	rejected := 0
	for _, d := range docs {
		r := result{doc: d}
		line := summaryLine(summary, r.ref())
		switch {
		case line == "":
			fail("summary does not mention %s", r.ref())
		case d.expectRejected:
			rejected++
			if !strings.Contains(line, "refused (expected)") {
				fail("%s: want a refusal, got %q", r.ref(), line)
			}
		case isWorkload(d.obj):
			kinds[kindOf(d.obj)] = true
			if !strings.Contains(line, "injected: prestop,") {
				fail("%s: want an injection, got %q", r.ref(), line)
			}
		}
	}
	for _, k := range []string{"kubeflow.org/PyTorchJob", "training.kubedl.io/PyTorchJob", "/Pod"} {
		if !kinds[k] {
			fail("examples/demo has no valid %s", k)
		}
	}
	if rejected == 0 {
		fail("examples/demo has no invalid object")
	}
	if line := summaryLine(summary, "TrainJob trainguard-demo/pytorch-mnist"); !strings.Contains(line, "admitted by trainguard's Trainer webhook") {
		fail("examples/demo's TrainJob: want it admitted by trainguard's Trainer webhook, got %q", line)
	}
	for _, want := range []string{
		`admission webhook "pytorchjobs.validate.trainguard.io" denied the request`,
		`admission webhook "trainjobs.validate.trainguard.io" denied the request`, // 07-invalid-trainjob.yaml
		"spec.elasticPolicy.maxReplicas: Invalid value: 2",
		"spec.elasticPolicy.rdzvHost: Required value",
		"+ spec.initContainers[trainguard-agent-install]:",
		"+ spec.containers[pytorch].ports[taskd-port]: {containerPort: 9601",
		"\n  warning: ", // admission warnings reach the client (02-elastic-job.yaml's nProcPerNode)
	} {
		if !strings.Contains(out, want) {
			fail("output lacks %q", want)
		}
	}

	m := regexp.MustCompile(`trainguard serve is ready \(pid (\d+),`).FindStringSubmatch(out)
	if m == nil {
		fail("output lacks trainguard's pid")
	} else if pid, _ := strconv.Atoi(m[1]); !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		fail("trainguard serve (pid %d) still runs after the demo", pid)
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out)
	}
}

func goBuild(t *testing.T, root, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// summaryLine is the summary's line for ref ("Kind namespace/name").
func summaryLine(summary, ref string) string {
	for _, l := range strings.Split(summary, "\n") {
		if strings.HasPrefix(l, "  "+ref+" ") {
			return l
		}
	}
	return ""
}

func kindOf(u *unstructured.Unstructured) string {
	return u.GroupVersionKind().Group + "/" + u.GetKind()
}

func TestDiffObjects(t *testing.T) {
	obj := func(spec map[string]any, ann map[string]any) *unstructured.Unstructured {
		md := map[string]any{"name": "p", "uid": "x"}
		if ann != nil {
			md["annotations"] = ann
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}}
	}
	before := obj(map[string]any{
		"terminationGracePeriodSeconds": int64(30),
		"containers": []any{map[string]any{"name": "pytorch", "image": "a", "args": []any{"x"},
			"env": []any{map[string]any{"name": "A", "value": "1"}}}},
	}, map[string]any{"trainguard.io/inject": "disabled"})
	after := obj(map[string]any{
		"terminationGracePeriodSeconds": int64(90),
		"volumes":                       []any{map[string]any{"name": "v", "emptyDir": map[string]any{}}},
		"containers": []any{map[string]any{"name": "pytorch", "image": "a", "args": []any{"x"},
			"env":       []any{map[string]any{"name": "A", "value": "1"}, map[string]any{"name": "B", "value": "2"}},
			"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": "1"}}}},
	}, map[string]any{"trainguard.io/injected": "gpu"})
	after.Object["metadata"].(map[string]any)["uid"] = "y"

	var got []string
	for _, c := range diffObjects(before, after) {
		got = append(got, objdiff.Render(c, c.Path))
	}
	want := []string{
		`+ metadata.annotations[trainguard.io/injected]: gpu`,
		`+ spec.containers[pytorch].env[B]: "2"`,
		`+ spec.containers[pytorch].resources.limits[nvidia.com/gpu]: "1"`,
		`~ spec.terminationGracePeriodSeconds: 30 -> 90`,
		`+ spec.volumes[v]: {emptyDir: {}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
