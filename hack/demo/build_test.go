package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

// TestDemoBuildsOnlyWhatItRuns: on a fresh machine `make demo` compiles a
// Kubernetes tree only for the kube-apiserver it starts (the suites'
// default, which controlplane.Start runs), not the previous release's too
// (16 of a first run's 30 minutes). The recipe runs with a stand-in `go`
// that records each binary it is asked to build; nothing is compiled.
func TestDemoBuildsOnlyWhatItRuns(t *testing.T) {
	root, err := chart.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	fake := filepath.Join(tmp, "fakego")
	if err := os.MkdirAll(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(tmp, "built")
	script := "#!/bin/sh\n# records the -o target and makes it\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo \"$2\" >>" + log + "; mkdir -p \"$(dirname \"$2\")\"; : >\"$2\"; chmod +x \"$2\"; fi; shift; done\n"
	if err := os.WriteFile(filepath.Join(fake, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The demo target's own recipe for the control plane: make -n names it.
	out, err := exec.Command("make", "-C", root, "-n", "--no-print-directory", "demo", "BIN="+filepath.Join(tmp, "bin")).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n demo: %v\n%s", err, out)
	}
	var recipe []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "build-k8s.sh") {
			recipe = append(recipe, line)
		}
	}
	if len(recipe) == 0 {
		t.Fatalf("make demo does not build the control plane with hack/build-k8s.sh:\n%s", out)
	}
	for _, line := range recipe {
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"), "K8S_BIN_DIR="+filepath.Join(tmp, "k8s"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}
	built, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var apiservers []string
	for _, b := range strings.Fields(string(built)) {
		if filepath.Base(b) == "kube-apiserver" {
			apiservers = append(apiservers, filepath.Base(filepath.Dir(b)))
		}
	}
	if len(apiservers) != 1 || apiservers[0] != controlplane.DefaultKubeVersion {
		t.Errorf("make demo builds kube-apiserver %v; it runs only %s", apiservers, controlplane.DefaultKubeVersion)
	}
}
