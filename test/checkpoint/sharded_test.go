package checkpoint_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sharded state: two gloo ranks train the example with a
// ZeroRedundancyOptimizer, whose Adam state each rank holds only for its
// share of the parameters. Every rank saves its part; a resumed run must
// print the very losses of a run that was never interrupted.

const zeroSteps = 40

// lossLine matches a step's line; the loss is a number only: torchrun's tee
// of two workers started with -u (print writes its newline apart) can put
// one worker's line right after another's last digit ("loss
// 0.642994[default0]:rank 0: completed step 13 ..."), and \S+ then swallowed
// the second line's start (a fresh-clone run lost rank 0's step 13 so).
var lossLine = regexp.MustCompile(`rank (\d+): completed step (\d+) loss (-?[0-9.]+|nan)`)

// losses maps "rank/step" to the printed loss.
func losses(out string) map[string]string {
	m := map[string]string{}
	for _, l := range lossLine.FindAllStringSubmatch(out, -1) {
		m[l[1]+"/"+l[2]] = l[3]
	}
	return m
}

func zeroReference(t *testing.T) map[string]string {
	ref := startTorchrun(t, newPod(t), "--zero", "--steps", strconv.Itoa(zeroSteps))
	require.NoError(t, ref.wait(180*time.Second), ref.out.String())
	return losses(ref.out.String())
}

// resumeZero resumes the job in p on two ranks and checks both ranks
// resumed at one step and printed the reference's losses from there on.
func resumeZero(t *testing.T, p pod, ref map[string]string) (checkpoint string, step int) {
	t.Helper()
	next := startTorchrun(t, p, "--zero", "--steps", strconv.Itoa(zeroSteps))
	var from [2]string
	for rank := 0; rank < 2; rank++ {
		m := next.waitFor(fmt.Sprintf(`rank %d: resumed from (\S+) at step (\d+)`, rank), 180*time.Second)
		from[rank] = m[1] + "@" + m[2]
		checkpoint, step = m[1], atoi(t, m[2])
	}
	require.Equal(t, from[0], from[1], "the ranks resumed from different checkpoints")
	require.NoError(t, next.wait(180*time.Second), next.out.String())
	got := losses(next.out.String())
	require.Len(t, got, 2*(zeroSteps-step), next.out.String())
	for key, loss := range got {
		assert.Equal(t, ref[key], loss, "rank/step %s: the resumed run's loss differs from the uninterrupted run's", key)
	}
	return checkpoint, step
}

func atoi(t testing.TB, s string) int {
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// shardedCommit checks that a committed checkpoint holds both ranks' parts.
func shardedCommit(t *testing.T, p pod, name string) {
	t.Helper()
	commit := readJSONFile(t, filepath.Join(p.ckptDir, name, "commit.json"))
	assert.EqualValues(t, 3, commit["format"])
	assert.EqualValues(t, 2, commit["shards"])
	files := commit["files"].(map[string]any)
	for _, f := range []string{"state.json", "shard-00000.json", "shard-00000.pt", "shard-00001.json", "shard-00001.pt"} {
		assert.Contains(t, files, f)
	}
}

func TestZeroShardedCheckpoints(t *testing.T) {
	ref := zeroReference(t)
	require.Len(t, ref, 2*zeroSteps)

	t.Run("preStop", func(t *testing.T) {
		p := newPod(t)
		old := startTorchrun(t, p, "--zero", "--steps", strconv.Itoa(zeroSteps), "--step-delay", "0.05")
		old.waitFor(`rank 1: completed step 8 `, 180*time.Second)
		r := runAgent(t, p, "prestop", "--timeout=30s")
		require.Equal(t, exitOK, r.code, r.stderr)
		ack := readJSONFile(t, filepath.Join(p.signalDir, "ack.json"))
		require.Equal(t, "ok", ack["status"], ack)
		require.Error(t, old.wait(60*time.Second), "the trainer should stop after its termination checkpoint")
		shardedCommit(t, p, ack["checkpoint"].(string))
		name, step := resumeZero(t, p, ref)
		assert.Equal(t, ack["checkpoint"], name)
		assert.EqualValues(t, ack["step"], step)
	})

	t.Run("periodic", func(t *testing.T) {
		p := newPod(t)
		old := startTorchrun(t, p, "--zero", "--steps", "100000", "--step-delay", "0.1", "--save-every", "5")
		pointerPath := filepath.Join(p.ckptDir, "trainguard-latest.json")
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(pointerPath)
			var ptr struct{ Step int }
			return err == nil && json.Unmarshal(b, &ptr) == nil && ptr.Step >= 10
		}, 180*time.Second, 20*time.Millisecond, "no periodic save at step 10")
		old.signal(syscall.SIGKILL) // a lost node: no preStop, no dying gasp
		old.wait(30 * time.Second)
		pointer := readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-latest.json"))
		shardedCommit(t, p, pointer["file"].(string))
		name, step := resumeZero(t, p, ref)
		assert.Equal(t, pointer["file"], name)
		assert.GreaterOrEqual(t, step, 10)
		assert.Less(t, step, zeroSteps)
	})

	t.Run("another world size", func(t *testing.T) {
		p := newPod(t)
		first := startTorchrun(t, p, "--zero", "--steps", "5", "--save-every", "5")
		require.NoError(t, first.wait(180*time.Second), first.out.String())
		ckpts := filepath.Join(p.ckptDir, "trainguard-ckpt-*")
		before, err := filepath.Glob(ckpts)
		require.NoError(t, err)
		logs := t.TempDir() // torchrun writes each rank's stderr there (--redirects=2), where the refusal is
		argv := torchrunArgvN(t, 3, "--zero", "--steps", "10")
		for i, a := range argv {
			if len(a) > 10 && a[:10] == "--log_dir=" {
				argv[i] = "--log_dir=" + logs
			}
		}
		three := startProc(t, p.env("OMP_NUM_THREADS=1"), argv...)
		require.Error(t, three.wait(180*time.Second), "three ranks loaded a checkpoint two wrote:\n%s", three.out.String())
		out := three.out.String()
		for rank := 0; rank < 3; rank++ {
			errs, err := filepath.Glob(filepath.Join(logs, "*", "attempt_0", strconv.Itoa(rank), "stderr.log"))
			require.NoError(t, err)
			require.Len(t, errs, 1, "rank %d's stderr", rank)
			b, err := os.ReadFile(errs[0])
			require.NoError(t, err)
			assert.Contains(t, string(b), "sharded state saved by 2 ranks, and this job runs 3 ranks", "rank %d did not say why", rank)
		}
		assert.NotContains(t, out, "resumed from")
		assert.NotContains(t, out, "completed step")
		after, err := filepath.Glob(ckpts)
		require.NoError(t, err)
		assert.Equal(t, before, after, "the refused run wrote checkpoints")
	})
}

// TestLossLineReadsGluedLines: two workers' lines as torchrun's tee can
// glue them, both read.
func TestLossLineReadsGluedLines(t *testing.T) {
	got := losses("[default1]:rank 1: completed step 14 loss 0.642994[default0]:rank 0: completed step 13 loss 0.550213\n")
	assert.Equal(t, map[string]string{"1/14": "0.642994", "0/13": "0.550213"}, got)
}
