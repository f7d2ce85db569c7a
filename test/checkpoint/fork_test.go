package checkpoint_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probeSource is a user program that reports what its interpreter gave it
// (before it imports anything), then does what PROBE_DO says.
const probeSource = `"""the probe"""
_g = sorted(globals())
import sys
_tg = "trainguard" in sys.modules
import atexit, json, os, signal, threading, time
t0 = time.perf_counter()
_preloaded = "torch" in sys.modules
import torch
_imported = time.perf_counter() - t0
with open("/proc/self/cmdline", "rb") as f:
    _cmdline = [a.decode() for a in f.read().split(b"\0") if a]
print("PROBE " + json.dumps({
    "argv": sys.argv, "orig_argv": sys.orig_argv, "path0": sys.path[0], "file": __file__, "name": __name__,
    "spec": getattr(__spec__, "name", None), "package": __package__, "cached": __cached__ is not None,
    "loader": type(__loader__).__name__, "globals": _g, "doc": __doc__, "trainguard imported": _tg,
    "main": sys.modules["__main__"].__dict__ is globals(), "cmdline": _cmdline, "executable": sys.executable,
    "signals": {s.name: str(signal.getsignal(s)) for s in signal.Signals
                if s not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(s) is not signal.SIG_DFL},
    "stdout": [type(sys.stdout.buffer).__name__, sys.stdout.write_through, sys.stdout.line_buffering],
}, sort_keys=True), flush=True)
print("PRELOADED %s %.4f" % (_preloaded, _imported), flush=True)
do = os.environ.get("PROBE_DO", "")
if do == "exit3":
    sys.exit(3)
if do == "message":
    sys.exit("bye now")
if do == "raise":
    raise ValueError("boom")
if do == "interrupt":
    raise KeyboardInterrupt
if do == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if do == "atexit":
    atexit.register(lambda: print("ATEXIT ran", flush=True))
    threading.Thread(target=lambda: (time.sleep(0.3), print("THREAD joined", flush=True))).start()
if do == "wait":
    print("READY", flush=True)
    time.sleep(600)
print("END", end="")
`

// supervisedRun is one run of the probe under the supervisor.
type supervisedRun struct {
	code    int
	out     string // the probe's own output: the supervisor's lines and PRELOADED taken out
	log     string // the whole output
	probe   map[string]any
	preload bool
}

var supervisorLine = regexp.MustCompile(`(?m)^(trainguard supervise: .*|PRELOADED .*)\n`)

// runProbe runs the probe as `python3 <script>` (form "script"),
// `python3 -u <script>` ("unbuffered") or `python3 -m tgprobe` (form
// "module") under the supervisor, forking
// (fork) or not (TRAINGUARD_FORK=0), with no restarts.
func runProbe(t *testing.T, dir, form, do string, fork bool) supervisedRun {
	t.Helper()
	argv := []string{python, "-m", "trainguard", "supervise", "--", python}
	switch form {
	case "module":
		argv = append(argv, "-m", "tgprobe", "a1", "--flag")
	case "unbuffered": // as torchrun starts its workers
		argv = append(argv, "-u", filepath.Join(dir, "tgprobe.py"), "a1", "--flag")
	default:
		argv = append(argv, filepath.Join(dir, "tgprobe.py"), "a1", "--flag")
	}
	// OMP_NUM_THREADS=1 as every trainer here: without it Debian's
	// OpenBLAS starts a thread pool when torch is imported, and the
	// supervisor (rightly) refuses to fork a process with threads.
	env := []string{"OMP_NUM_THREADS=1", "PROBE_DO=" + do, "TRAINGUARD_INPROCESS_RESTARTS=0",
		"PYTHONPATH=" + filepath.Join(world.repo, "sdk", "python") + ":" + dir}
	if !fork {
		env = append(env, "TRAINGUARD_FORK=0")
	}
	p := startProc(t, newPod(t).env(env...), argv...)
	if do == "wait" {
		p.waitFor(`READY`, 120*time.Second)
		require.NoError(t, syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)) // the supervisor alone, as the kubelet does
	}
	_ = p.wait(120 * time.Second)
	r := supervisedRun{code: p.cmd.ProcessState.ExitCode(), log: p.out.String()}
	r.out = supervisorLine.ReplaceAllString(r.log, "")
	if m := regexp.MustCompile(`(?m)^PROBE (.*)$`).FindStringSubmatch(r.log); m != nil {
		require.NoError(t, json.Unmarshal([]byte(m[1]), &r.probe))
	}
	r.preload = strings.Contains(r.log, "PRELOADED True")
	return r
}

// TestForkedTrainerIsAsANewProcess: the trainer the supervisor forks (torch
// imported once, in the supervisor) sees what a new interpreter gives it
// and ends as it would: for the script and the -m form (and the script
// with -u, as torchrun starts it) and each way of ending (exit code, SystemExit with a message, an uncaught exception,
// KeyboardInterrupt, its own SIGKILL, atexit handlers and a non-daemon
// thread, a SIGTERM forwarded by the supervisor), the supervisor's exit
// code and the program's output and sys/__main__/signal/cmdline state are
// those of the same command started as a new process (TRAINGUARD_FORK=0);
// only the forked one finds torch imported.
func TestForkedTrainerIsAsANewProcess(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tgprobe.py"), []byte(probeSource), 0o644))
	cases := map[string]int{"": 0, "exit3": 3, "message": 1, "raise": 1, "interrupt": 128 + int(syscall.SIGINT),
		"kill": 128 + int(syscall.SIGKILL), "atexit": 0, "wait": 128 + int(syscall.SIGTERM)}
	for _, form := range []string{"script", "module", "unbuffered"} {
		for do, code := range cases {
			if form == "unbuffered" && do != "" && do != "raise" {
				continue // -u changes the streams only
			}
			t.Run(form+"/"+do, func(t *testing.T) {
				t.Parallel()
				forked, fresh := runProbe(t, dir, form, do, true), runProbe(t, dir, form, do, false)
				require.NotNil(t, forked.probe, forked.log)
				require.NotNil(t, fresh.probe, fresh.log)
				assert.Contains(t, forked.log, "the trainer starts as a fork of this process")
				assert.Regexp(t, `forked the trainer \(pid \d+\): its code runs \S+s after the fork`, forked.log)
				assert.True(t, forked.preload, "the forked trainer imported torch again:\n%s", forked.log)
				assert.False(t, fresh.preload, "a new process found torch imported:\n%s", fresh.log)
				assert.Equal(t, fresh.probe, forked.probe, "what the program sees")
				assert.Equal(t, code, fresh.code, fresh.log)
				assert.Equal(t, fresh.code, forked.code, "the supervisor's exit code:\n%s", forked.log)
				assert.Equal(t, fresh.out, forked.out, "the program's output")
			})
		}
	}
}

// TestForkFallsBackBeforeTheUsersCode: when the fast path fails before the
// user's code runs (here the script does not compile, or is not there),
// the supervisor says why and starts the command as a new process, whose
// interpreter reports the error as it always did: same output, same code.
func TestForkFallsBackBeforeTheUsersCode(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tgprobe.py"), []byte("print('never'\n"), 0o644))
	forked, fresh := runProbe(t, dir, "script", "", true), runProbe(t, dir, "script", "", false)
	assert.Contains(t, forked.log, "the fork path failed before the trainer's code ran (SyntaxError:")
	assert.Contains(t, forked.log, "starting it as a new process, from now on")
	assert.Contains(t, fresh.out, "SyntaxError")
	assert.Equal(t, fresh.out, forked.out)
	assert.Equal(t, 1, forked.code, forked.log)

	require.NoError(t, os.Remove(filepath.Join(dir, "tgprobe.py")))
	forked, fresh = runProbe(t, dir, "script", "", true), runProbe(t, dir, "script", "", false)
	assert.Contains(t, forked.log, "the fork path failed before the trainer's code ran (FileNotFoundError:")
	assert.Contains(t, fresh.out, "can't open file")
	assert.Equal(t, fresh.out, forked.out)
	assert.Equal(t, 2, forked.code, forked.log)
}

// forkedRestart is the victim's supervisor's report of a forked restart:
// the new trainer's pid and the seconds from fork to its code.
var forkedRestart = regexp.MustCompile(`died of SIGKILL; starting it again[^\n]*\ntrainguard supervise: forked the trainer \(pid (\d+)\): its code runs ([0-9.]+)s after the fork, at generation (\d+)`)

// assertForkedRestart: the victim's supervisor forked its new trainer
// (torch preloaded) and the trainer's pid is that one.
func assertForkedRestart(t *testing.T, victim *proc, p pod) {
	t.Helper()
	m := victim.waitFor(forkedRestart.String(), 60*time.Second)
	assert.Equal(t, m[1], strconv.Itoa(trainerPid(t, p)), "the heartbeat's pid is not the forked trainer's")
	t.Logf("the restarted trainer's code ran %ss after the fork (generation %s)", m[2], m[3])
}
