package checkpoint_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pod is what the webhook gives one training pod: a checkpoint dir (shared
// PVC, here a temp dir), a name and the per-pod signal dir.
type pod struct {
	name      string
	ckptDir   string
	signalDir string
	extra     []string // more injected env, e.g. the job identity
}

func newPod(t testing.TB) pod {
	dir := t.TempDir()
	return pod{name: "job-master-0", ckptDir: dir, signalDir: filepath.Join(dir, ".trainguard", "job-master-0")}
}

// jobPod is a pod of job `job` in namespace team-a whose checkpoint claim is
// the directory claim: the job's directory is
// <claim>/team-a/pytorchjob.kubeflow.org/<job>, as the kubelet builds it
// from the webhook's subPathExpr for a kubeflow PyTorchJob.
func jobPod(t testing.TB, claim, job string) pod {
	dir := filepath.Join(claim, "team-a", "pytorchjob.kubeflow.org", job)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	name := job + "-master-0"
	return pod{name: name, ckptDir: dir, signalDir: filepath.Join(dir, ".trainguard", name),
		extra: []string{"TRAINGUARD_NAMESPACE=team-a", "TRAINGUARD_CHECKPOINT_KEY=pytorchjob.kubeflow.org/" + job + "/"}}
}

// env is the injected environment, in the webhook's order, plus PYTHONPATH.
func (p pod) env(extra ...string) []string {
	e := append(os.Environ(),
		"TRAINGUARD_POD_NAME="+p.name,
		"TRAINGUARD_CHECKPOINT_DIR="+p.ckptDir,
		"TRAINGUARD_SIGNAL_DIR="+p.signalDir,
		"TRAINGUARD_PRESTOP_TIMEOUT=20s",
		"MIGRATION_CKPT_PATH="+p.ckptDir,
		"MIGRATION_SIGNAL_PATH="+p.signalDir,
		"PYTHONPATH="+filepath.Join(world.repo, "sdk", "python"),
		"PYTHONUNBUFFERED=1",
	)
	e = append(e, p.extra...)
	return append(e, extra...)
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type proc struct {
	t        testing.TB
	cmd      *exec.Cmd
	out      *lockedBuffer
	done     chan struct{}
	err      error
	exitedAt time.Time // when the process ended; read after done is closed
}

// startProc starts a process in its own process group (torchrun has
// children) and reaps it as soon as it exits, so the agent never sees a zombie.
func startProc(t testing.TB, env []string, argv ...string) *proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = world.repo
	cmd.Env = env
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start(), "start %v", argv)
	p := &proc{t: t, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); p.exitedAt = time.Now(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL); <-p.done })
	return p
}

func startTrainer(t testing.TB, p pod, extraEnv []string, args ...string) *proc {
	argv := append([]string{python, "examples/trainer/train.py"}, args...)
	return startProc(t, p.env(extraEnv...), argv...)
}

// startTorchrun runs two CPU workers. --redirects/--tee are explicit because
// torch 1.13's default ("0", Std.NONE) crashes torchrun on Python 3.11
// (IntFlag iteration skips the zero member); workers' stdout is tee'd to ours.
func startTorchrun(t testing.TB, p pod, args ...string) *proc {
	return startProc(t, p.env("OMP_NUM_THREADS=1"), torchrunArgv(t, args...)...)
}

func torchrunArgv(t testing.TB, args ...string) []string {
	return torchrunArgvN(t, 2, args...)
}

func torchrunArgvN(t testing.TB, nproc int, args ...string) []string {
	return append([]string{python, "-m", "torch.distributed.run", "--nproc_per_node=" + strconv.Itoa(nproc),
		"--master_port=" + strconv.Itoa(freePort(t)), "--redirects=2", "--tee=1", "--log_dir=" + t.TempDir(),
		"examples/trainer/train.py"}, args...)
}

func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// waitFor waits until the output matches re and returns the submatches.
func (p *proc) waitFor(re string, timeout time.Duration) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		if m := rx.FindStringSubmatch(p.out.String()); m != nil {
			return m
		}
		select {
		case <-p.done:
			if m := rx.FindStringSubmatch(p.out.String()); m != nil {
				return m
			}
			p.t.Fatalf("process exited (%v) before printing %q; output:\n%s", p.err, re, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("no %q within %s; output:\n%s", re, timeout, p.out.String())
	return nil
}

// wait returns the exit error (nil on success), failing the test after timeout.
func (p *proc) wait(timeout time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.t.Fatalf("process still running after %s; output:\n%s", timeout, p.out.String())
		return nil
	}
}

type agentResult struct {
	code    int
	stderr  string
	elapsed time.Duration
}

// runAgent runs trainguard-agent as the kubelet would: in the pod's env.
func runAgent(t testing.TB, p pod, args ...string) agentResult {
	t.Helper()
	cmd := exec.Command(world.agent, args...)
	cmd.Env = p.env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	res := agentResult{stderr: stderr.String(), elapsed: time.Since(start)}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	default:
		t.Fatalf("run agent: %v", err)
	}
	return res
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func readJSONFile(t testing.TB, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "parse %s", path)
	return m
}

func writeJSONFile(t testing.TB, path string, v any) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, b, 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// compareStates runs the example's comparison helper (torch.equal on every tensor).
func compareStates(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command(python, append([]string{filepath.Join(world.repo, "examples", "trainer", "compare_state.py")}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "states differ: %s", out)
	require.Contains(t, string(out), "IDENTICAL")
}

// fakeTrainer stands in for the SDK where only the protocol matters (fast,
// no torch): it heartbeats with this test process's pid and, if answer is
// set, acknowledges each new request with status.
type fakeTrainer struct {
	stop chan struct{}
	done chan struct{}
}

func startFakeTrainer(t testing.TB, signalDir string, answer bool, status string) {
	t.Helper()
	f := &fakeTrainer{stop: make(chan struct{}), done: make(chan struct{})}
	require.NoError(t, os.MkdirAll(signalDir, 0o755))
	beat := func() {
		writeJSONQuiet(filepath.Join(signalDir, "heartbeat.json"), map[string]any{
			"pid": os.Getpid(), "time": float64(time.Now().UnixNano()) / 1e9, "state": "training", "step": 1})
	}
	beat()
	go func() {
		defer close(f.done)
		var answered float64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			beat()
			if !answer {
				continue
			}
			b, err := os.ReadFile(filepath.Join(signalDir, "request.json"))
			var req map[string]any
			if err != nil || json.Unmarshal(b, &req) != nil || req["generation"].(float64) <= answered {
				continue
			}
			answered = req["generation"].(float64)
			writeJSONQuiet(filepath.Join(signalDir, "ack.json"), map[string]any{
				"generation": answered, "nonce": req["nonce"], "status": status, "step": 1, "checkpoint": "fake.pt",
				"bytes": 42, "error": "fake failure"})
		}
	}()
	t.Cleanup(func() { close(f.stop); <-f.done })
}

// writeJSONQuiet is for goroutines, which must not call t.FailNow; a failed
// write shows up as the agent not seeing the file.
func writeJSONQuiet(path string, v any) {
	b, _ := json.Marshal(v)
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o644) == nil {
		os.Rename(tmp, path)
	}
}
