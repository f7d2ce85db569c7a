// Package checkpoint_test drives real processes end to end: the built
// trainguard-agent binary, the example trainer under /usr/bin/python3 (with
// torch) and torchrun. Nothing is skipped: a missing prerequisite fails.
package checkpoint_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/trainguard/trainguard/internal/testing/repo"
)

const python = "/usr/bin/python3"

// env is the world the tests share, found once in TestMain.
type env struct {
	repo  string // repository root
	agent string // freshly built trainguard-agent
}

var world env // set once by TestMain before any test runs, read-only afterwards

func TestMain(m *testing.M) {
	os.Exit(setupAndRun(m))
}

func setupAndRun(m *testing.M) int {
	repo, err := repo.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpoint e2e:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "tg-agent-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpoint e2e:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	agent := filepath.Join(tmp, "trainguard-agent")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", agent, "./cmd/trainguard-agent")
	build.Dir = repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "checkpoint e2e: build trainguard-agent: %v\n%s", err, out)
		return 1
	}
	if out, err := exec.Command(python, "-c", "import torch, torch.distributed.run").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "checkpoint e2e: %s cannot import torch (run `make python-deps`): %v\n%s", python, err, out)
		return 1
	}
	world = env{repo: repo, agent: agent}
	return m.Run()
}
