package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// isHelp is a request for a command's usage, which is not a mistake.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "-help" }

// runInstall copies the running executable into DIR. The init container runs
// it from trainguard's image; the training container then finds the agent in
// the shared emptyDir. It is idempotent: a second run replaces the file
// atomically, so a half-copied binary is never visible.
func runInstall(args []string, stderr io.Writer) int {
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Fprint(stderr, "usage: trainguard-agent install DIR\n")
		return ExitOK
	}
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		fmt.Fprint(stderr, "usage: trainguard-agent install DIR\n")
		return ExitUsage
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "trainguard-agent install: locate own executable: %v\n", err)
		return ExitError
	}
	dst := filepath.Join(args[0], "trainguard-agent")
	if err := installCopy(self, dst); err != nil {
		fmt.Fprintf(stderr, "trainguard-agent install: %v\n", err)
		return ExitError
	}
	fmt.Fprintf(stderr, "trainguard-agent installed at %s\n", dst)
	return ExitOK
}

func installCopy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer func() { _ = in.Close() }() // read-only
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return writeAtomic(dst, 0o755, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
