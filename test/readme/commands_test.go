package readme

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shellFence is a fenced sh block; its body is group 1.
var shellFence = regexp.MustCompile("(?s)```sh\n(.*?)```")

// TestReadmeCommandsAreTheChartsTested: the helm commands and the opt-in
// annotation README.md quotes ("Try it", "Install") are, word for word,
// commands between the chart README's tested-commands markers, which
// test/chart renders and lints with the real helm. The README no longer
// includes that whole section, so this is what keeps its few lines from
// drifting.
func TestReadmeCommandsAreTheChartsTested(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	chart, err := os.ReadFile("../../charts/trainguard/README.md")
	require.NoError(t, err)
	const begin, end = "<!-- BEGIN tested-commands -->", "<!-- END tested-commands -->"
	i, j := strings.Index(string(chart), begin), strings.Index(string(chart), end)
	require.True(t, i >= 0 && j > i, "the chart README must hold %q ... %q", begin, end)
	tested := map[string]bool{}
	for _, block := range shellFence.FindAllStringSubmatch(string(chart)[i:j], -1) {
		for _, line := range strings.Split(block[1], "\n") {
			tested[strings.TrimSpace(line)] = true
		}
	}
	require.NotEmpty(t, tested)

	var quoted int
	for _, block := range shellFence.FindAllStringSubmatch(string(readme), -1) {
		for _, line := range strings.Split(block[1], "\n") {
			cmd := strings.TrimSpace(line)
			if k := strings.Index(cmd, "  #"); k >= 0 {
				cmd = strings.TrimSpace(cmd[:k])
			}
			if !strings.HasPrefix(cmd, "helm ") && !strings.Contains(cmd, "trainguard.io/inject=") {
				continue
			}
			quoted++
			assert.True(t, tested[cmd], "README.md quotes %q, which is not one of the chart README's tested commands; copy it from there", cmd)
		}
	}
	assert.GreaterOrEqual(t, quoted, 2, "README.md should show how to install (helm) and opt a namespace in")
}
