package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func TestCheckDirAllowedRefusesSystemDirectories(t *testing.T) {
	for _, dir := range []string{"/", "/etc", "/etc/x", "/usr/lib", "/bin", "/sbin", "/lib", "/lib64/x", "/libx32",
		"/opt/trainguard", "/opt/trainguard/bin", "/proc/1", "/sys", "/dev/shm", "/run/secrets/x", "/var/run/secrets", "/boot", "rel/dir"} {
		if err := checkDirAllowed("--checkpoint-dir", dir); err == nil {
			t.Errorf("%s accepted", dir)
		}
	}
	for _, dir := range []string{"/checkpoint", "/mnt/ckpt/team-a/pytorchjob/j", "/opt/other", "/var/lib/ckpt", "/tmp/x"} {
		if err := checkDirAllowed("--checkpoint-dir", dir); err != nil {
			t.Errorf("%s refused: %v", dir, err)
		}
	}
}

func TestPrestopRefusesACheckpointDirUnderASystemDirectory(t *testing.T) {
	var stderr bytes.Buffer
	code := Run([]string{"prestop", "--checkpoint-dir=/etc", "--pod=p"}, mapEnv(nil), &stderr)
	if code != ExitUsage || !strings.Contains(stderr.String(), "system directory /etc") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

func TestSignalDirThroughASymlinkIsRefused(t *testing.T) {
	ckpt, elsewhere := t.TempDir(), t.TempDir()
	must(t, os.Symlink(elsewhere, filepath.Join(ckpt, ".trainguard")))
	err := ensureSignalDir(ckpt, filepath.Join(ckpt, ".trainguard", "pod-0"))
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("symlinked .trainguard accepted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "pod-0")); !os.IsNotExist(err) {
		t.Fatal("the agent created a directory through the symlink")
	}
	must(t, os.Mkdir(filepath.Join(ckpt, "sig"), 0o755))
	must(t, os.Symlink(elsewhere, filepath.Join(ckpt, "sig", "pod-0")))
	if err := ensureSignalDir(ckpt, filepath.Join(ckpt, "sig", "pod-0")); err == nil {
		t.Fatal("symlinked signal dir accepted")
	}
}

// A directory owned by someone else: as root, one handed to nobody (65534);
// as anyone else, the root-owned /tmp.
func TestSignalDirOwnedBySomeoneElseIsRefused(t *testing.T) {
	dir := "/tmp"
	if os.Geteuid() == 0 {
		dir = filepath.Join(t.TempDir(), "foreign")
		must(t, os.Mkdir(dir, 0o777))
		must(t, os.Chown(dir, 65534, 65534))
	}
	parent := openDir(t, filepath.Dir(dir))
	_, err := parent.subdir(filepath.Base(dir))
	if err == nil || !strings.Contains(err.Error(), "belongs to uid") {
		t.Fatalf("foreign-owned %s accepted: %v", dir, err)
	}
	if err := ensureSignalDir(filepath.Dir(dir), dir); err == nil {
		t.Fatal("ensureSignalDir accepted a foreign-owned signal dir")
	}
}

func TestEnsureSignalDirCreatesOwnDirectories(t *testing.T) {
	ckpt := t.TempDir()
	sig := filepath.Join(ckpt, ".trainguard", "pod-0")
	must(t, ensureSignalDir(ckpt, sig))
	must(t, ensureSignalDir(ckpt, sig)) // idempotent
	if fi, err := os.Lstat(sig); err != nil || !fi.IsDir() {
		t.Fatalf("signal dir not created: %v", err)
	}
}

func TestHeartbeatFromTheFutureIsNotFresh(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{now, true}, {now.Add(-2 * time.Second), true}, {now.Add(-4 * time.Second), false},
		{now.Add(500 * time.Millisecond), true}, {now.Add(time.Hour), false}, {now.Add(2 * time.Second), false},
	} {
		hb := Heartbeat{Time: unixSeconds(tc.at)}
		if got := hb.fresh(now, 3*time.Second); got != tc.want {
			t.Errorf("heartbeat at now%+v: fresh=%v, want %v", tc.at.Sub(now), got, tc.want)
		}
	}
}

func TestReadJSONDoesNotFollowSymlinksOrBlockOnFIFOs(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.json")
	must(t, os.WriteFile(target, []byte(`{"generation":9}`), 0o644))
	link := filepath.Join(dir, "ack.json")
	must(t, os.Symlink(target, link))
	var ack Ack
	d := openDir(t, dir)
	if err := readJSON(d, "ack.json", &ack); err == nil {
		t.Fatal("read through a symlink")
	}
	fifo := filepath.Join(dir, "fifo.json")
	must(t, mkfifo(fifo))
	done := make(chan error, 1)
	go func() { done <- readJSON(d, "fifo.json", &ack) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read a FIFO")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("readJSON blocked on a FIFO")
	}
	big := filepath.Join(dir, "big.json")
	must(t, os.WriteFile(big, bytes.Repeat([]byte(" "), maxProtocolFile+10), 0o644))
	if err := readJSON(d, "big.json", &ack); err == nil {
		t.Fatal("read an oversized file")
	}
}

func TestEventLogDoesNotAppendThroughASymlink(t *testing.T) {
	dir, victim := t.TempDir(), filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(victim, []byte("untouched\n"), 0o644))
	must(t, os.Symlink(victim, filepath.Join(dir, "preStop.log")))
	var stderr bytes.Buffer
	l := newEventLog(&stderr, openDir(t, dir), nil, "preStop.log", "x: ")
	l.printf("hello")
	if b, _ := os.ReadFile(victim); string(b) != "untouched\n" {
		t.Fatalf("appended through the symlink: %q", b)
	}
	if !strings.Contains(stderr.String(), "symlink") {
		t.Fatalf("no explanation on stderr: %s", stderr.String())
	}
}

func TestTerminationMessageLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "termination-log")
	must(t, os.WriteFile(path, []byte("user message without newline"), 0o644))
	var stderr bytes.Buffer
	l := newEventLog(&stderr, openDir(t, dir), nil, "preStop.log", "")
	appendTerminationMessage(path, ckptResult{code: ExitOK, step: 12, bytes: 3456}, 1234567*time.Microsecond, l)
	appendTerminationMessage(path, ckptResult{code: ExitTimeout, step: 13}, 2*time.Second, l)
	b, err := os.ReadFile(path)
	must(t, err)
	want := "user message without newline\n" +
		`trainguard.io/checkpoint {"outcome":"saved","step":12,"bytes":3456,"seconds":1.235}` + "\n" +
		`trainguard.io/checkpoint {"outcome":"timeout","step":13,"bytes":0,"seconds":2}` + "\n"
	if string(b) != want {
		t.Fatalf("termination message:\n%s\nwant:\n%s", b, want)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
		var rec map[string]any
		must(t, json.Unmarshal([]byte(strings.TrimPrefix(line, terminationPrefix)), &rec))
	}
	for code, want := range map[int]string{ExitOK: "saved", ExitTimeout: "timeout", ExitNoTrainer: "no-trainer",
		ExitTrainerFailed: "failed", ExitTrainerGone: "failed", ExitIO: "failed"} {
		if got := outcomeOf(code); got != want {
			t.Errorf("outcome of exit %d = %q, want %q", code, got, want)
		}
	}
}

func TestTerminationMessageNeverFailsTheHook(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(victim, nil, 0o644))
	link := filepath.Join(dir, "termination-log")
	must(t, os.Symlink(victim, link))
	var stderr bytes.Buffer
	env := mapEnv(map[string]string{"TRAINGUARD_CHECKPOINT_DIR": dir, "TRAINGUARD_POD_NAME": "p",
		"TRAINGUARD_TERMINATION_MESSAGE_PATH": link})
	code := Run([]string{"prestop", "--timeout=1s", "--heartbeat-wait=0s"}, env, &stderr)
	if code != ExitNoTrainer {
		t.Fatalf("exit %d, want %d (no trainer): %s", code, ExitNoTrainer, stderr.String())
	}
	if b, _ := os.ReadFile(victim); len(b) != 0 {
		t.Fatalf("wrote through the symlink: %q", b)
	}
	if !strings.Contains(stderr.String(), "cannot append the checkpoint outcome") {
		t.Fatalf("failure not logged: %s", stderr.String())
	}
	// A plain file gets the line, with the no-trainer outcome.
	path := filepath.Join(dir, "real-termination-log")
	env = mapEnv(map[string]string{"TRAINGUARD_CHECKPOINT_DIR": dir, "TRAINGUARD_POD_NAME": "p",
		"TRAINGUARD_TERMINATION_MESSAGE_PATH": path})
	Run([]string{"prestop", "--timeout=1s", "--heartbeat-wait=0s"}, env, &stderr)
	b, err := os.ReadFile(path)
	must(t, err)
	if !strings.HasPrefix(string(b), `trainguard.io/checkpoint {"outcome":"no-trainer","step":0,"bytes":0,"seconds":`) {
		t.Fatalf("termination message %q", b)
	}
}

// The webhook (contract.ParseCheckpointPath) and the agent refuse the same
// directories: probe both with every root and with paths around them.
func TestAgentAndWebhookDenylistsAgree(t *testing.T) {
	probes := []string{"/", "/checkpoint", "/library", "/lib", "/opt", "/opt/trainguardx", "/var/run", "/run", "/home/x"}
	for _, root := range forbiddenRoots() {
		r := strings.TrimSuffix(root, "*")
		probes = append(probes, r, r+"/x", r+"64")
	}
	for _, p := range probes {
		_, webhookErr := contract.ParseCheckpointPath(p)
		agentErr := checkDirAllowed("dir", p)
		if (webhookErr == nil) != (agentErr == nil) {
			t.Errorf("%s: webhook says %v, agent says %v", p, webhookErr, agentErr)
		}
	}
}

func TestNoncesAreRandomHex(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		n, err := newNonce()
		must(t, err)
		if len(n) != 32 || strings.Trim(n, "0123456789abcdef") != "" || seen[n] {
			t.Fatalf("bad or repeated nonce %q", n)
		}
		seen[n] = true
	}
}

// ensureSignalDir opens the checkpoint dir and the signal dir below it as
// prestop does, and closes both: the checks alone.
func ensureSignalDir(checkpointDir, signalDir string) error {
	ckpt, err := openDirNoFollow(checkpointDir)
	if err != nil {
		return err
	}
	defer ckpt.close()
	sig, err := openSignalDir(ckpt, checkpointDir, signalDir)
	sig.close()
	return err
}

func openDir(t *testing.T, path string) *dirFD {
	t.Helper()
	d, err := openDirNoFollow(path)
	must(t, err)
	t.Cleanup(d.close)
	return d
}
