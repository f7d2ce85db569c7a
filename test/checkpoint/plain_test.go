package checkpoint_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runPlain runs the example trainer's --plain mode (the baseline without
// trainguard) to completion under python -I, so the SDK cannot be imported
// even by accident, and returns its output.
func runPlain(t *testing.T, dir string, args ...string) string {
	t.Helper()
	argv := append([]string{"-I", filepath.Join(world.repo, "examples", "trainer", "train.py"), "--plain", "--ckpt-dir", dir}, args...)
	cmd := exec.Command(python, argv...)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"OMP_NUM_THREADS=1", "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// lossAt is the loss the output reports for step.
func lossAt(t *testing.T, out string, step int) string {
	t.Helper()
	m := regexp.MustCompile(`completed step ` + strconv.Itoa(step) + ` loss (\S+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "step %d in\n%s", step, out)
	return m[1]
}

// The plain arm's trainer saves every N steps atomically, keeps the newest,
// and on start resumes from the newest file that loads: a torn newer file
// (a copy cut short) and a stray temporary file are passed over, and the
// resumed run's losses are those of an uninterrupted one.
func TestPlainTrainerSavesEveryNStepsAndResumesFromTheNewestCompleteFile(t *testing.T) {
	dir := t.TempDir()
	out := runPlain(t, dir, "--steps", "35", "--save-every", "10")
	assert.NotContains(t, out, "trainguard")
	for _, step := range []string{"10", "20", "30"} {
		assert.Regexp(t, `rank 0: saved \S+/ckpt-0000000`+step+`\.pt at step `+step+`\n`, out)
	}
	names := func() []string {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var n []string
		for _, e := range entries {
			n = append(n, e.Name())
		}
		return n
	}
	assert.Equal(t, []string{"ckpt-000000020.pt", "ckpt-000000030.pt"}, names(), "the newest two, no temporary file left")

	// A newer file cut short, and a temporary file a crash left behind.
	whole, err := os.ReadFile(filepath.Join(dir, "ckpt-000000030.pt"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ckpt-000000040.pt"), whole[:len(whole)/2], 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ckpt-000000050.pt.tmp.1"), whole, 0o600))

	resumed := runPlain(t, dir, "--steps", "32")
	assert.Regexp(t, `rank 0: resumed from \S+/ckpt-000000030\.pt at step 30,`, resumed, "the newest complete file, not the torn one")
	assert.Contains(t, resumed, "skipping "+filepath.Join(dir, "ckpt-000000040.pt"))
	assert.NotContains(t, resumed, "completed step 30 ", "no step done twice")

	fresh := runPlain(t, t.TempDir(), "--steps", "32")
	assert.Equal(t, lossAt(t, fresh, 31), lossAt(t, resumed, 31), "the resumed run trains as the uninterrupted one")
	assert.Equal(t, lossAt(t, fresh, 32), lossAt(t, resumed, 32))
	assert.Equal(t, lossAt(t, fresh, 31), lossAt(t, out, 31), "same model and data order in every run")
}
