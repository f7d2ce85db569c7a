// Package install tests the install story of README.md's "Install" section
// with the real tools: one release number for the binary, the chart, the
// image and the SDK; `go install ./cmd/trainguard`; `pip install
// ./sdk/python` with /usr/bin/python3; and `make image`, whose archive is
// checked the way a loader reads it.
package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/version"
	"github.com/trainguard/trainguard/test/chart"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := chart.RepoRoot()
	require.NoError(t, err)
	return root
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	require.NoError(t, err)
	return string(data)
}

// pythonString returns the string assigned to name at the start of a line
// (`name = "x"`) in a pyproject.toml or a Python module.
func pythonString(t *testing.T, text, name, file string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` = "([^"]*)"$`).FindStringSubmatch(text)
	require.NotNil(t, m, "%s has no line %s = \"...\"", file, name)
	return m[1]
}

// TestOneReleaseEverywhere: the chart's version and appVersion (the image
// tag it deploys and injects), the SDK's package version and __version__,
// and what the Makefile stamps are all internal/foundations/version.AppVersion. When
// one drifts, hack/set-version.sh sets them all.
func TestOneReleaseEverywhere(t *testing.T) {
	want := version.AppVersion
	require.Regexp(t, `^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`, want, "AppVersion is a semantic version (Helm requires one)")

	var meta struct{ Version, AppVersion string }
	require.NoError(t, yaml.Unmarshal([]byte(readFile(t, "charts/trainguard/Chart.yaml")), &meta))
	const fix = "; run hack/set-version.sh to set one release everywhere"
	assert.Equal(t, want, meta.Version, "charts/trainguard/Chart.yaml version"+fix)
	assert.Equal(t, want, meta.AppVersion, "charts/trainguard/Chart.yaml appVersion"+fix)
	assert.Equal(t, want, pythonString(t, readFile(t, "sdk/python/pyproject.toml"), "version", "sdk/python/pyproject.toml"),
		"sdk/python/pyproject.toml version"+fix)
	assert.Equal(t, want, pythonString(t, readFile(t, "sdk/python/trainguard/__init__.py"), "__version__", "sdk/python/trainguard/__init__.py"),
		"sdk/python/trainguard/__init__.py __version__"+fix)
	assert.Equal(t, version.ImageRepository+":"+want, version.Image)

	cmd := exec.Command("make", "-s", "--no-print-directory", "version")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, want, strings.TrimSpace(string(out)), "the Makefile's VERSION (image tag, ldflags)")
}

// TestGoInstallReportsTheRelease runs the README's `go install
// ./cmd/trainguard` (into a temporary GOBIN) and the installed binary's
// `version`: without any build flags it must name the chart's release.
func TestGoInstallReportsTheRelease(t *testing.T) {
	gobin := t.TempDir()
	// -trimpath, as make build and make image build: the packages compiled
	// for those are reused (a cold machine compiles the tree once, not
	// twice); the release reported comes from the same source either way.
	cmd := exec.Command("go", "install", "-trimpath", "./cmd/trainguard")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go install ./cmd/trainguard: %s", out)

	out, err = exec.Command(filepath.Join(gobin, "trainguard"), "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := strings.TrimSpace(string(out))
	t.Logf("go install ./cmd/trainguard; trainguard version: %s", got)
	assert.Regexp(t, `^`+regexp.QuoteMeta(version.AppVersion)+`( \(commit [^)]+\))?$`, got)
}

// TestTheReadmeSaysHowToGetEachPiece: the install section names the
// commands these tests run, and the chart's NOTES name the CLI's install.
func TestTheReadmeSaysHowToGetEachPiece(t *testing.T) {
	readme := readFile(t, "README.md")
	_, install, found := strings.Cut(readme, "\n## Install\n")
	require.True(t, found, "README.md has an ## Install section")
	install, _, _ = strings.Cut(install, "\n## ")
	for _, cmd := range []string{"make image", "go install ./cmd/trainguard", "pip install ./sdk/python",
		"docker load -i", "ctr -n k8s.io images import", "kind load image-archive"} {
		assert.True(t, strings.Contains(install, cmd), "README's Install section must say how to get the pieces: %q is missing", cmd)
	}
	for _, release := range []string{"bin/image/trainguard-" + version.AppVersion + ".tar", "`make version` prints it (" + version.AppVersion + ")"} {
		assert.True(t, strings.Contains(install, release), "README's Install section names this release: %q is missing (hack/set-version.sh)", release)
	}
	notes := readFile(t, "charts/trainguard/templates/NOTES.txt")
	assert.True(t, strings.Contains(notes, "go install"), "NOTES.txt tells users to run `trainguard inject`, so it says how to get it (go install)")
}
