// Package repo finds trainguard's source tree from a test, wherever the
// test's package lives (tests run in their package's directory).
package repo

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// modulePath identifies the repository root's go.mod (a nested module, such
// as hack/tools/*, has its own go.mod and is walked past).
const modulePath = "github.com/trainguard/trainguard"

// Root walks up from the working directory to trainguard's go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}
