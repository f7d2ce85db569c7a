package checkpoint_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Exit codes documented in docs/checkpoint-protocol.md.
const (
	exitOK            = 0
	exitUsage         = 2
	exitNoTrainer     = 3
	exitTimeout       = 4
	exitTrainerFailed = 5
	exitHookFailed    = 6
	exitTrainerGone   = 7
)

func preStopLog(t *testing.T, p pod) string {
	b, err := os.ReadFile(filepath.Join(p.ckptDir, "preStop.log"))
	require.NoError(t, err)
	return string(b)
}

func TestNoTrainerReturnsWithinFiveSeconds(t *testing.T) {
	p := newPod(t)
	r := runAgent(t, p, "prestop", "--timeout=60s")
	assert.Equal(t, exitNoTrainer, r.code, r.stderr)
	assert.Less(t, r.elapsed, 5*time.Second)
	assert.Contains(t, r.stderr, "no trainer listening")
	assert.Contains(t, preStopLog(t, p), "no trainer listening")
}

func TestDeadTrainerHeartbeatIsNotALiveTrainer(t *testing.T) {
	p := newPod(t)
	// A fresh-looking heartbeat of a process that no longer exists (pid far above pid_max).
	writeJSONFile(t, filepath.Join(p.signalDir, "heartbeat.json"), map[string]any{
		"pid": 1 << 30, "time": float64(time.Now().UnixNano()) / 1e9})
	r := runAgent(t, p, "prestop", "--timeout=60s")
	assert.Equal(t, exitNoTrainer, r.code, r.stderr)
	assert.Less(t, r.elapsed, 5*time.Second)
}

func TestHungTrainerTimesOut(t *testing.T) {
	p := newPod(t)
	// The real SDK heartbeats from its thread while the main thread never reaches a safe point.
	tr := startProc(t, p.env(), python, "-c",
		"import time\nfrom trainguard import migrator\nmigrator.register('m', {})\nmigrator.listening()\nprint('listening', flush=True)\ntime.sleep(120)")
	tr.waitFor("listening", 20*time.Second)
	r := runAgent(t, p, "prestop", "--timeout=2s")
	assert.Equal(t, exitTimeout, r.code, r.stderr)
	assert.Less(t, r.elapsed, 3500*time.Millisecond)
	assert.GreaterOrEqual(t, r.elapsed, 2*time.Second)
	assert.Contains(t, r.stderr, "timeout: no acknowledgement of generation 1")
	assert.Contains(t, preStopLog(t, p), "timeout: no acknowledgement")
}

func TestStaleAckIsNeverTakenForANewRequest(t *testing.T) {
	p := newPod(t)
	// What a previous pod with the same name left behind: request and ack of generation 5.
	writeJSONFile(t, filepath.Join(p.signalDir, "request.json"), map[string]any{"generation": 5, "deadline": 1})
	writeJSONFile(t, filepath.Join(p.signalDir, "ack.json"), map[string]any{"generation": 5, "status": "ok", "step": 99})
	startFakeTrainer(t, p.signalDir, false, "")

	r := runAgent(t, p, "prestop", "--timeout=1500ms")
	assert.Equal(t, exitTimeout, r.code, r.stderr)
	assert.Contains(t, r.stderr, "ignoring acknowledgement of generation 5: waiting for generation 6")
	req := readJSONFile(t, filepath.Join(p.signalDir, "request.json"))
	assert.EqualValues(t, 6, req["generation"])

	// The next request gets a fresh generation again, so the stale acks never line up.
	r = runAgent(t, p, "prestop", "--timeout=500ms")
	assert.Equal(t, exitTimeout, r.code, r.stderr)
	req = readJSONFile(t, filepath.Join(p.signalDir, "request.json"))
	assert.EqualValues(t, 7, req["generation"])
}

func TestTrainerReportedFailure(t *testing.T) {
	p := newPod(t)
	startFakeTrainer(t, p.signalDir, true, "error")
	r := runAgent(t, p, "prestop", "--timeout=10s")
	assert.Equal(t, exitTrainerFailed, r.code, r.stderr)
	assert.Contains(t, r.stderr, "fake failure")
}

func TestUsageErrors(t *testing.T) {
	p := newPod(t)
	for _, args := range [][]string{
		{"prestop", "--no-such-flag"},
		{"prestop", "--timeout=soon"},
		{"prestop", "--then-sleep=1s", "--then-http-get=http://127.0.0.1:1/"},
		{"prestop", "--then-http-get=https://example.invalid/"},
		{"prestop", "stray"},
		{"frobnicate"},
		{},
	} {
		r := runAgent(t, p, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, strings.ToLower(r.stderr), "usage", "%v", args)
	}
}

func TestInstallCopiesItselfAtomically(t *testing.T) {
	dir := t.TempDir()
	want, err := os.ReadFile(world.agent)
	require.NoError(t, err)
	for i := 0; i < 2; i++ { // idempotent
		r := runAgent(t, newPod(t), "install", dir)
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	dst := filepath.Join(dir, "trainguard-agent")
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, want, got, "installed binary differs from the original")
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "temp files left behind")
}

func TestChainedExecHookRunsAfterCheckpointAndPropagatesItsCode(t *testing.T) {
	p := newPod(t)
	startFakeTrainer(t, p.signalDir, true, "ok")
	marker := filepath.Join(p.ckptDir, "user-hook-ran")
	r := runAgent(t, p, "prestop", "--timeout=10s", "--", "sh", "-c", "echo ran > "+marker+"; exit 42")
	assert.Equal(t, 42, r.code, r.stderr)
	assert.FileExists(t, marker)
	log := preStopLog(t, p)
	assert.Less(t, strings.Index(log, "finish ckpts"), strings.Index(log, "running chained exec hook"), log)

	// Without a trainer the user's hook still runs; the agent reports the checkpoint outcome.
	p2 := newPod(t)
	marker2 := filepath.Join(p2.ckptDir, "ran")
	r = runAgent(t, p2, "prestop", "--timeout=10s", "--", "touch", marker2)
	assert.Equal(t, exitNoTrainer, r.code, r.stderr)
	assert.FileExists(t, marker2)
}

func TestChainedExecHookIsKilledAtTheTimeout(t *testing.T) {
	p := newPod(t)
	startFakeTrainer(t, p.signalDir, true, "ok")
	r := runAgent(t, p, "prestop", "--timeout=1s", "--", "sleep", "30")
	assert.Equal(t, exitHookFailed, r.code, r.stderr)
	assert.Less(t, r.elapsed, 3*time.Second)
}

func TestChainedHTTPGetHook(t *testing.T) {
	var gotHeader, gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHeader, gotPath = r.Header.Get("X-Stop-Reason"), r.URL.RequestURI()
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()

	p := newPod(t)
	startFakeTrainer(t, p.signalDir, true, "ok")
	r := runAgent(t, p, "prestop", "--timeout=10s", "--then-http-get="+srv.URL+"/stop?now=1",
		"--then-http-header=X-Stop-Reason: drain")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "drain", gotHeader)
	assert.Equal(t, "/stop?now=1", gotPath)

	r = runAgent(t, p, "prestop", "--timeout=10s", "--then-http-get="+srv.URL+"/fail")
	assert.Equal(t, exitHookFailed, r.code, r.stderr)
	assert.Contains(t, r.stderr, "answered 500")
}

func TestChainedSleepHook(t *testing.T) {
	p := newPod(t)
	startFakeTrainer(t, p.signalDir, true, "ok")
	r := runAgent(t, p, "prestop", "--timeout=10s", "--then-sleep=400ms")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.GreaterOrEqual(t, r.elapsed, 400*time.Millisecond)
	assert.Contains(t, r.stderr, "chained sleep hook slept 400ms")

	// The whole preStop stays within --timeout even when the user's sleep is longer.
	r = runAgent(t, p, "prestop", "--timeout=1s", "--then-sleep=10s")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Less(t, r.elapsed, 2*time.Second)
	assert.Contains(t, r.stderr, "cut from 10s")
}
