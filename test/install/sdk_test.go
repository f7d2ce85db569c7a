package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/agent"
	"github.com/trainguard/trainguard/internal/foundations/version"
)

// python is the interpreter the checkpoint tests use (Debian's, with
// python3-torch), not whatever python3 is first on PATH.
const python = "/usr/bin/python3"

// TestPipInstallSDK installs the SDK as the README says, `pip install
// ./sdk/python`, into a fresh virtual environment of /usr/bin/python3, and
// imports it from there: the installed distribution and the module both
// name the release. The venv sees the system's setuptools, and the build
// runs without an index (--no-build-isolation --no-index), so the test
// needs no network; everything else is pip's ordinary install. The SDK is
// copied first so the build leaves nothing in the source tree.
func TestPipInstallSDK(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "sdk")
	cp := exec.Command("cp", "-r", filepath.Join(repoRoot(t), "sdk", "python"), src)
	out, err := cp.CombinedOutput()
	require.NoError(t, err, "%s", out)

	venv := filepath.Join(tmp, "venv")
	out, err = exec.Command(python, "-m", "venv", "--system-site-packages", venv).CombinedOutput()
	require.NoError(t, err, "creating a venv with %s: %s", python, out)
	py := filepath.Join(venv, "bin", "python")
	pip := exec.Command(py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--disable-pip-version-check", src)
	pip.Env = append(os.Environ(), "PIP_NO_CACHE_DIR=1", "PYTHONNOUSERSITE=1")
	out, err = pip.CombinedOutput()
	require.NoError(t, err, "pip install ./sdk/python: %s", out)

	// Run from an empty directory, so the import can only find the installed copy.
	check := exec.Command(py, "-c", `
import importlib.metadata, os, trainguard
from trainguard import migrator
assert os.path.realpath(trainguard.__file__).startswith(os.path.realpath(os.environ["VENV"])), trainguard.__file__
print(importlib.metadata.version("trainguard"), trainguard.__version__, type(migrator).__name__)
`)
	check.Dir = t.TempDir()
	check.Env = append(os.Environ(), "VENV="+venv, "PYTHONPATH=", "PYTHONNOUSERSITE=1")
	out, err = check.CombinedOutput()
	require.NoError(t, err, "importing the installed SDK: %s", out)
	got := strings.Fields(strings.TrimSpace(string(out)))
	t.Logf("pip install ./sdk/python; distribution, __version__, migrator: %v", got)
	assert.Equal(t, []string{version.AppVersion, version.AppVersion, "Migrator"}, got,
		"the installed SDK's distribution version and trainguard.__version__ are the chart's release")

	// The install puts trainguard-python beside the venv's python: what
	// torchrun runs its workers with under in-process recovery
	// (PYTHON_EXEC), that python under the supervisor, exit code passed on.
	run := exec.Command(filepath.Join(venv, "bin", "trainguard-python"), "-c", `import os, sys
print(sys.executable, b"trainguard-python" in open("/proc/%d/cmdline" % os.getppid(), "rb").read())
sys.exit(3)`)
	run.Dir = t.TempDir()
	run.Env = append(os.Environ(), "PYTHONPATH=", "PYTHONNOUSERSITE=1")
	out, err = run.Output()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "trainguard-python: %s", out)
	assert.Equal(t, 3, exit.ExitCode(), "the trainer's exit code, passed on")
	assert.Equal(t, py+" True", strings.TrimSpace(string(out)), "the venv's python, the supervisor its parent")
}

// TestOfflineSDKInstallNeedsWheel holds the README's offline note to the
// truth: in a venv without the system's packages (a fresh Python 3.11
// venv: setuptools, no wheel) the offline line fails as the README says,
// and in one created as the README says it installs (TestPipInstallSDK).
// The [torch] extra asks for the torch the README names.
func TestOfflineSDKInstallNeedsWheel(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "sdk")
	out, err := exec.Command("cp", "-r", filepath.Join(repoRoot(t), "sdk", "python"), src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	venv := filepath.Join(tmp, "venv")
	out, err = exec.Command(python, "-m", "venv", venv).CombinedOutput()
	require.NoError(t, err, "creating a clean venv: %s", out)
	py := filepath.Join(venv, "bin", "python")
	hasWheel := exec.Command(py, "-c", "import wheel").Run() == nil
	pip := exec.Command(py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--disable-pip-version-check", src)
	pip.Env = append(os.Environ(), "PIP_NO_CACHE_DIR=1", "PYTHONNOUSERSITE=1")
	out, err = pip.CombinedOutput()
	if hasWheel {
		require.NoError(t, err, "a venv with wheel installs offline: %s", out)
	} else {
		require.Error(t, err, "the README says a venv without wheel cannot build offline")
		assert.Contains(t, string(out), "bdist_wheel", "the README quotes this failure")
	}

	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	assert.Contains(t, string(readme), "python3 -m venv --system-site-packages venv\nvenv/bin/pip install --no-build-isolation --no-index ./sdk/python")
	pyproject, err := os.ReadFile(filepath.Join(repoRoot(t), "sdk", "python", "pyproject.toml"))
	require.NoError(t, err)
	sdkReadme, err := os.ReadFile(filepath.Join(repoRoot(t), "sdk", "python", "README.md"))
	require.NoError(t, err)
	assert.Contains(t, string(pyproject), `"torch>=1.13"`)
	assert.Contains(t, string(sdkReadme), "torch ≥ 1.13", "the extra and the SDK's README name the same torch")
}

// TestAgentVersionIsTheRelease: trainguard-agent keeps its own copy of
// the release (it may import nothing of trainguard); it must be the one
// the chart, the image and `trainguard version` name.
func TestAgentVersionIsTheRelease(t *testing.T) {
	assert.Equal(t, version.AppVersion, agent.Version)
}
