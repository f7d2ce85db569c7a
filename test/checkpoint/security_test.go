package checkpoint_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const exitIO = 8

// A process that can write the volume plants preStop.log as a symlink to a
// file it wants the agent to append to. The agent must not follow it, and
// the checkpoint must still be taken.
func TestSymlinkedLogFileIsNotFollowed(t *testing.T) {
	p := newPod(t)
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("precious\n"), 0o644))
	require.NoError(t, os.Symlink(victim, filepath.Join(p.ckptDir, "preStop.log")))
	startFakeTrainer(t, p.signalDir, true, "ok")
	r := runAgent(t, p, "prestop", "--timeout=10s")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "symlink")
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "precious\n", string(b), "the agent appended through the symlink")
}

// The signal dir's parent replaced by a symlink to another directory (where
// someone even heartbeats and acks): the agent refuses it and writes nothing there.
func TestSymlinkedSignalDirIsRefused(t *testing.T) {
	p := newPod(t)
	elsewhere := t.TempDir()
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(p.ckptDir, ".trainguard")))
	startFakeTrainer(t, filepath.Join(elsewhere, p.name), true, "ok")
	r := runAgent(t, p, "prestop", "--timeout=10s")
	assert.Equal(t, exitIO, r.code, r.stderr)
	assert.Less(t, r.elapsed, 5*time.Second)
	assert.Contains(t, r.stderr, "is a symlink")
	assert.NoFileExists(t, filepath.Join(elsewhere, p.name, "request.json"), "the agent wrote through the symlink")
}

// A signal dir that belongs to another user is refused (the test runs as
// root in CI; as anyone else, a root-owned directory is foreign).
func TestForeignOwnedSignalDirIsRefused(t *testing.T) {
	p := newPod(t)
	require.NoError(t, os.MkdirAll(p.signalDir, 0o777))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(p.signalDir, 65534, 65534))
	} else {
		p.signalDir = "/"
		p.ckptDir = "/"
	}
	r := runAgent(t, p, "prestop", "--timeout=10s", "--signal-dir="+p.signalDir)
	assert.NotEqual(t, exitOK, r.code, r.stderr)
	assert.Less(t, r.elapsed, 5*time.Second)
}

// A heartbeat dated an hour ahead with a live pid is forged (or the clock is
// broken): it does not count as a listening trainer.
func TestHeartbeatFromTheFutureIsNotATrainer(t *testing.T) {
	p := newPod(t)
	writeJSONFile(t, filepath.Join(p.signalDir, "heartbeat.json"), map[string]any{
		"pid": os.Getpid(), "time": float64(time.Now().Add(time.Hour).UnixNano()) / 1e9, "state": "training"})
	r := runAgent(t, p, "prestop", "--timeout=30s")
	assert.Equal(t, exitNoTrainer, r.code, r.stderr)
	assert.Less(t, r.elapsed, 5*time.Second)
	assert.Contains(t, r.stderr, "in the future")
}

// A forger sees each request (generation and all) and answers it at once
// with status ok, but cannot know the nonce: the agent keeps waiting and
// ends at its timeout.
func TestAckWithoutTheNonceIsRefused(t *testing.T) {
	p := newPod(t)
	startFakeTrainer(t, p.signalDir, false, "")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			b, err := os.ReadFile(filepath.Join(p.signalDir, "request.json"))
			var req map[string]any
			if err != nil || json.Unmarshal(b, &req) != nil {
				continue
			}
			writeJSONQuiet(filepath.Join(p.signalDir, "ack.json"), map[string]any{
				"generation": req["generation"], "nonce": strings.Repeat("0", 32), "status": "ok", "step": 7})
		}
	}()
	defer func() { close(stop); <-done }()
	r := runAgent(t, p, "prestop", "--timeout=1500ms")
	assert.Equal(t, exitTimeout, r.code, r.stderr)
	assert.Less(t, r.elapsed, 3*time.Second)
	assert.Contains(t, r.stderr, "without this request's nonce")
}

// Two jobs on one claim, real trainers: neither resumes, prunes or
// acknowledges the other's files.
func TestTwoJobsOnOneClaimStayApart(t *testing.T) {
	claim := t.TempDir()
	a, b := jobPod(t, claim, "job-a"), jobPod(t, claim, "job-b")
	first := startTrainer(t, a, nil, "--steps", "12", "--save-every", "3")
	require.NoError(t, first.wait(60*time.Second), first.out.String())
	aFiles := listDir(t, a.ckptDir)

	trA := startTrainer(t, a, []string{"TRAINGUARD_AFTER_CHECKPOINT=continue"}, "--steps", "100000", "--step-delay", "0.02")
	trA.waitFor(`rank 0: resumed from \S+ at step 12`, 60*time.Second)
	trB := startTrainer(t, b, []string{"TRAINGUARD_AFTER_CHECKPOINT=continue"}, "--steps", "100000", "--step-delay", "0.02")
	trB.waitFor(`rank 0: completed step 3 `, 60*time.Second)
	assert.NotContains(t, trB.out.String(), "resumed from", "job B resumed job A's checkpoint")

	r := runAgent(t, b, "prestop", "--timeout=20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, trA.out.String(), "checkpoint requested", "job A answered job B's request")
	assert.NoFileExists(t, filepath.Join(a.signalDir, "ack.json"))
	for i := 0; i < 3; i++ {
		r = runAgent(t, b, "prestop", "--timeout=20s")
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	for _, f := range aFiles {
		assert.DirExists(t, filepath.Join(a.ckptDir, f), "job B's saves pruned job A's %s", f)
	}
	r = runAgent(t, a, "prestop", "--timeout=20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	ack := readJSONFile(t, filepath.Join(a.signalDir, "ack.json"))
	assert.FileExists(t, filepath.Join(a.ckptDir, ack["checkpoint"].(string), "commit.json"))
}

// A planted pickle payload in the job's own directory, made the newest
// checkpoint by a rewritten pointer: the resume refuses it, names the file,
// uses the previous good checkpoint, and the payload never runs.
func TestPlantedPickleNeverRunsOnResume(t *testing.T) {
	p := newPod(t)
	first := startTrainer(t, p, nil, "--steps", "10", "--save-every", "5")
	require.NoError(t, first.wait(60*time.Second), first.out.String())
	good := readJSONFile(t, filepath.Join(p.ckptDir, "trainguard-latest.json"))["file"].(string)
	marker := filepath.Join(t.TempDir(), "PWNED")
	plant := startProc(t, p.env(), python, "-c", plantScript, p.ckptDir, marker)
	require.NoError(t, plant.wait(60*time.Second), plant.out.String())
	require.NoFileExists(t, marker, "planting must not run the payload")

	next := startTrainer(t, p, nil, "--steps", "12")
	m := next.waitFor(`rank 0: resumed from (\S+) at step (\d+)`, 60*time.Second)
	require.NoError(t, next.wait(60*time.Second), next.out.String())
	assert.Equal(t, good, m[1])
	assert.Equal(t, "10", m[2])
	assert.Contains(t, next.out.String(), filepath.Join(p.ckptDir, "trainguard-ckpt-00000099", "tensors.pt"))
	assert.NoFileExists(t, marker, "the planted payload ran")
}

// plantScript writes a committed-looking checkpoint 99 whose tensor file
// unpickles to os.system("touch MARKER"), and points the pointer at it.
const plantScript = `
import json, os, sys, torch
d, marker = sys.argv[1], sys.argv[2]
class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + marker,))
p = os.path.join(d, "trainguard-ckpt-00000099")
os.makedirs(p)
torch.save([torch.zeros(1), Payload()], os.path.join(p, "tensors.pt"))
json.dump({"format": 2, "step": 999, "job": "", "states": {}}, open(os.path.join(p, "state.json"), "w"))
files = {n: os.path.getsize(os.path.join(p, n)) for n in ("tensors.pt", "state.json")}
json.dump({"format": 2, "generation": 1 << 30, "files": files}, open(os.path.join(p, "commit.json"), "w"))  # a forged generation: tried first
os.mkdir(os.path.join(d, "trainguard-gen-%d" % (1 << 30)))  # with its marker: a commit counts only up to the newest one
json.dump({"file": "trainguard-ckpt-00000099", "seq": 99, "step": 999}, open(os.path.join(d, "trainguard-latest.json"), "w"))
`

// The agent appends its outcome to the termination message after the
// user's own text, with what the real trainer acknowledged.
func TestTerminationMessageAfterARealCheckpoint(t *testing.T) {
	p := newPod(t)
	term := filepath.Join(t.TempDir(), "termination-log")
	require.NoError(t, os.WriteFile(term, []byte("user: shutting down"), 0o644))
	p.extra = append(p.extra, "TRAINGUARD_TERMINATION_MESSAGE_PATH="+term)
	tr := startTrainer(t, p, nil, "--steps", "100000", "--step-delay", "0.02", "--state-mb", "1")
	tr.waitFor(`completed step 5 `, 60*time.Second)
	r := runAgent(t, p, "prestop", "--timeout=20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	ack := readJSONFile(t, filepath.Join(p.signalDir, "ack.json"))
	b, err := os.ReadFile(term)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	require.Len(t, lines, 2, "%q", b)
	assert.Equal(t, "user: shutting down", lines[0])
	rec, ok := strings.CutPrefix(lines[1], "trainguard.io/checkpoint ")
	require.True(t, ok, lines[1])
	var got struct {
		Outcome string  `json:"outcome"`
		Step    int64   `json:"step"`
		Bytes   int64   `json:"bytes"`
		Seconds float64 `json:"seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(rec), &got))
	assert.Equal(t, "saved", got.Outcome)
	assert.EqualValues(t, ack["step"], got.Step)
	assert.EqualValues(t, ack["bytes"], got.Bytes)
	assert.Greater(t, got.Bytes, int64(1<<20), "1 MB of state was saved")
	assert.Greater(t, got.Seconds, 0.0)
}

func listDir(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "trainguard-ckpt-") {
			names = append(names, e.Name())
		}
	}
	require.NotEmpty(t, names)
	return names
}

// An ack.json planted with generation 2^63-1 made the
// agent's next request generation negative, and the trainer took the
// planted ack for its pod's last answered request: every preStop of the
// pod timed out. Both sides needed fixing (the agent bounds generations,
// the trainer believes only an ack that answers the request there).
func TestPlantedHugeAckDoesNotSilenceThePod(t *testing.T) {
	p := newPod(t)
	writeJSONFile(t, filepath.Join(p.signalDir, "ack.json"),
		map[string]any{"generation": int64(math.MaxInt64), "status": "ok", "nonce": ""})
	tr := startTrainer(t, p, nil, "--steps", "100000", "--step-delay", "0.02")
	tr.waitFor(`completed step 3 `, 60*time.Second)
	r := runAgent(t, p, "prestop", "--timeout=20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	req := readJSONFile(t, filepath.Join(p.signalDir, "request.json"))
	assert.Positive(t, req["generation"])
}

// A signal dir holding the largest generation (2^53-1, here a planted ack)
// makes every request of the pod that generation: the agent saturates
// there. The trainer told requests apart by the pod's newest generation, so
// it answered the first preStop and every later one timed out (exit 4).
func TestEveryPreStopIsAnsweredAtTheSaturatedGeneration(t *testing.T) {
	const maxGeneration = 1<<53 - 1
	p := newPod(t)
	writeJSONFile(t, filepath.Join(p.signalDir, "ack.json"),
		map[string]any{"generation": int64(maxGeneration), "status": "ok", "nonce": ""})
	tr := startTrainer(t, p, []string{"TRAINGUARD_AFTER_CHECKPOINT=continue"}, "--steps", "100000", "--step-delay", "0.02")
	tr.waitFor(`completed step 3 `, 60*time.Second)
	nonces := map[string]bool{}
	for i := 0; i < 3; i++ {
		r := runAgent(t, p, "prestop", "--timeout=20s")
		require.Equal(t, exitOK, r.code, "preStop %d: %s", i+1, r.stderr)
		req := readJSONFile(t, filepath.Join(p.signalDir, "request.json"))
		ack := readJSONFile(t, filepath.Join(p.signalDir, "ack.json"))
		assert.EqualValues(t, int64(maxGeneration), req["generation"], "preStop %d", i+1)
		assert.Equal(t, req["nonce"], ack["nonce"], "preStop %d: the ack answers this request", i+1)
		nonces[req["nonce"].(string)] = true
	}
	assert.Len(t, nonces, 3, "three requests, three nonces")
}
