package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInjectCLIMindClusterV26: `trainguard inject` adds MindCluster v26.1's
// TTP port (ttp-port 8000, TTP_PORT) and rescheduling labels, prints on
// stderr why it skipped the port where the user already uses 8000 or chose
// another TTP_PORT, and writes exactly the golden outputs.
func TestInjectCLIMindClusterV26(t *testing.T) {
	testdata := filepath.Join("..", "..", "webhook", "testdata")
	cfg := filepath.Join(testdata, "config.yaml")
	for _, name := range []string{"mindcluster-user-values", "mindcluster-ttp-conflicts", "mindcluster-taskd-disabled"} {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(testdata, name+".out.yaml"))
			require.NoError(t, err)
			res := runCLI(t, "", "inject", "-f", filepath.Join(testdata, name+".in.yaml"), "--config", cfg)
			require.Equal(t, 0, res.code, res.stderr)
			assert.Equal(t, string(want), res.stdout)
			warnings, err := os.ReadFile(filepath.Join(testdata, name+".warnings.txt"))
			if err == nil {
				for _, w := range strings.Split(strings.TrimSpace(string(warnings)), "\n") {
					// The golden files name the object as every command does.
					name, msg, _ := strings.Cut(w, ": ")
					assert.Contains(t, res.stderr, name+": warning: "+msg)
				}
			}
		})
	}

	res := runCLI(t, validJob, "inject", "-f", "-")
	require.Equal(t, 0, res.code, res.stderr)
	for _, want := range []string{"name: ttp-port", "containerPort: 8000", "name: TTP_PORT", `value: "8000"`,
		`pod-rescheduling: "on"`, `process-recover-enable: "on"`} {
		assert.Contains(t, res.stdout, want)
	}
	res = runCLI(t, validJob, "inject", "-f", "-", "--config", writeFile(t, "c.yaml", "taskd: {enabled: false}\n"))
	require.Equal(t, 0, res.code, res.stderr)
	for _, absent := range []string{"ttp-port", "TTP_PORT", "pod-rescheduling", "process-recover-enable", "taskd-port"} {
		assert.NotContains(t, res.stdout, absent, "taskd.enabled: false switches every MindCluster port and label off")
	}
}
