package controlplane

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// RunSuite is every integration suite's TestMain body: it runs the suite's
// setup-and-run function, reports a setup error under the suite's name and
// prints the suite's wall time (make test shows it), and returns the exit
// code for os.Exit.
func RunSuite(name string, m *testing.M, run func(*testing.M) (int, error)) int {
	start := time.Now()
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		code = 1
	}
	fmt.Printf("%s wall time: %s\n", name, time.Since(start).Round(time.Millisecond))
	return code
}
