//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The checkpoint claim is a host directory (hostPath PV), so the harness reads
// what the agent and the SDK wrote directly. Files are found by name anywhere
// under the namespace's claim, so the per-job directory layout is not assumed.

// newestJSON returns the newest file called name under dir, decoded.
func newestJSON(dir, name string) (map[string]any, string, error) {
	var best string
	var bestMod time.Time
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != name {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.ModTime().After(bestMod) {
			best, bestMod = p, fi.ModTime()
		}
		return nil
	})
	if best == "" {
		return nil, "", fmt.Errorf("no %s under %s", name, dir)
	}
	raw, err := os.ReadFile(best)
	if err != nil {
		return nil, best, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, best, fmt.Errorf("%s: %w", best, err)
	}
	return m, best, nil
}

func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

// hostPython runs Debian's /usr/bin/python3 (with python3-torch) on the host,
// with the repository's SDK importable.
func hostPython(root string, args ...string) (string, error) {
	cmd := exec.Command("/usr/bin/python3", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PYTHONPATH="+root+"/sdk/python")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("python3 %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// dumpStep reads the step recorded in a train.py --dump-state/--dump-final file.
func dumpStep(root, path string) (int, error) {
	out, err := hostPython(root, "-c", "import sys, torch; print(torch.load(sys.argv[1])['step'])", path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// A line may carry torchrun's "[default0]:" prefix (TrainJob pods).
var stepLine = regexp.MustCompile(`^(\S+) (?:\[\w+\]:)?rank 0: completed step (\d+)`)
var resumedLine = regexp.MustCompile(`^(\S+) (?:\[\w+\]:)?rank \d+: resumed from \S+ at step (\d+)`)

// lastStep is the last "rank 0: completed step N" of a timestamped log.
func lastStep(log string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if m := stepLine.FindStringSubmatch(l); m != nil {
			n, _ = strconv.Atoi(m[2])
		}
	}
	return n
}

// firstStepAfter is the time of the first completed step logged after t.
func firstStepAfter(log string, t time.Time) (time.Time, int, bool) {
	for _, l := range strings.Split(log, "\n") {
		m := stepLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err == nil && ts.After(t) {
			n, _ := strconv.Atoi(m[2])
			return ts, n, true
		}
	}
	return time.Time{}, 0, false
}
