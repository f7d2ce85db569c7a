// Package readme keeps the project's Markdown honest: included sections
// identical to the files they come from (docs/cli.md's golden inject
// examples and policy), README.md's install commands among the chart's
// tested ones, every relative link resolving, no branch named.
// Regenerate the included sections with:
//
//	go test ./test/readme -update
package readme

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the included sections from their sources")

var includeRE = regexp.MustCompile(`(?s)<!-- BEGIN include ([^ #]+)(?:#([a-z-]+))? -->\n(.*?)<!-- END include -->`)

// includingFiles are the Markdown files with include markers. README.md has
// none: a front door quotes a few commands, which
// TestReadmeCommandsAreTheChartsTested holds to the chart's tested ones.
func includingFiles() []string { return []string{"../../docs/cli.md"} }

func TestReadmeIncludesAreFresh(t *testing.T) {
	for _, path := range includingFiles() {
		t.Run(filepath.Base(path), func(t *testing.T) { checkIncludes(t, path) })
	}
}

func checkIncludes(t *testing.T, readmePath string) {
	data, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	readme := string(data)
	matches := includeRE.FindAllStringSubmatch(readme, -1)
	require.NotEmpty(t, matches, "%s has no include markers", readmePath)
	fresh := includeRE.ReplaceAllStringFunc(readme, func(block string) string {
		m := includeRE.FindStringSubmatch(block)
		body, err := render(m[1], m[2])
		require.NoError(t, err)
		return fmt.Sprintf("<!-- BEGIN include %s -->\n%s<!-- END include -->", m[1]+suffix(m[2]), body)
	})
	if *update {
		require.NoError(t, os.WriteFile(readmePath, []byte(fresh), 0o644))
		return
	}
	assert.Equal(t, fresh, readme, "%s is stale; run: go test ./test/readme -update", readmePath)
}

func suffix(marker string) string {
	if marker == "" {
		return ""
	}
	return "#" + marker
}

// render returns the included text: a region between BEGIN/END marker
// comments, a Markdown file without its title, or a YAML file in a fence.
func render(path, marker string) (string, error) {
	data, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		return "", fmt.Errorf("include %s: %w", path, err)
	}
	text := string(data)
	switch {
	case marker != "":
		begin, end := "<!-- BEGIN "+marker+" -->\n", "<!-- END "+marker+" -->"
		i, j := strings.Index(text, begin), strings.Index(text, end)
		if i < 0 || j < i {
			return "", fmt.Errorf("include %s#%s: markers not found", path, marker)
		}
		return text[i+len(begin) : j], nil
	case strings.HasSuffix(path, ".md"):
		if strings.HasPrefix(text, "# ") {
			text = text[strings.Index(text, "\n")+1:]
		}
		return nestHeadings(strings.TrimLeft(text, "\n"), 3), nil
	default:
		return "```" + strings.TrimPrefix(filepath.Ext(path), ".") + "\n" + text + "```\n", nil
	}
}

// nestHeadings shifts a Markdown document's headings so the shallowest
// becomes level top: an included file's sections nest under the README's
// own "##" section. Lines inside code fences are left alone.
func nestHeadings(text string, top int) string {
	lines := strings.Split(text, "\n")
	level := func(line string) int {
		n := 0
		for n < len(line) && line[n] == '#' {
			n++
		}
		if n == 0 || n >= len(line) || line[n] != ' ' {
			return 0
		}
		return n
	}
	shallowest, fenced := 0, false
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if n := level(l); !fenced && n > 0 && (shallowest == 0 || n < shallowest) {
			shallowest = n
		}
	}
	if shallowest == 0 || shallowest >= top {
		return text
	}
	shift := strings.Repeat("#", top-shallowest)
	fenced = false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced && level(l) > 0 {
			lines[i] = shift + l
		}
	}
	return strings.Join(lines, "\n")
}
