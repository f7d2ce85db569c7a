package repo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
)

// BuildTrainguard builds cmd/trainguard from the tree into dir and returns
// the binary's path, for tests that judge inputs with the real CLI.
func BuildTrainguard(dir string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "trainguard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/trainguard")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building trainguard: %w: %s", err, out)
	}
	return bin, nil
}

// Run runs bin with args and stdin and returns its exit code and output;
// err only when it could not run at all.
func Run(bin string, stdin io.Reader, args ...string) (code int, stdout, stderr string, err error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdin = stdin
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	var exitErr *exec.ExitError
	if err := cmd.Run(); errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		return 0, "", "", err
	}
	return code, out.String(), errOut.String(), nil
}
