package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// A writer of the volume swaps a signal-dir component for a symlink after
// the agent checked it: the agent must keep using the directory it checked
// (held open) and never write through the link. The swap happens when the
// agent first opens heartbeat.json in the signal dir (seen through inotify),
// which it does only after its checks, so the test needs no timing.
func TestSignalDirSwappedForASymlinkAfterTheCheckIsNotFollowed(t *testing.T) {
	for _, component := range []string{".trainguard", "pod-0"} {
		t.Run(component, func(t *testing.T) { testSwapAfterCheck(t, component) })
	}
}

func testSwapAfterCheck(t *testing.T, component string) {
	ckpt, victimRoot := t.TempDir(), t.TempDir()
	sig := filepath.Join(ckpt, ".trainguard", "pod-0")
	must(t, os.MkdirAll(sig, 0o755))
	writeHeartbeat(t, sig, time.Now().Add(-time.Hour)) // stale: the agent keeps looking
	// What the link will point at: another job's signal dir with a live trainer.
	victim := filepath.Join(victimRoot, "pod-0")
	must(t, os.Mkdir(victim, 0o755))
	writeHeartbeat(t, victim, time.Now())
	opened := watchOpen(t, sig, heartbeatFile)

	var stderr bytes.Buffer
	env := mapEnv(map[string]string{"TRAINGUARD_CHECKPOINT_DIR": ckpt, "TRAINGUARD_POD_NAME": "pod-0"})
	done := make(chan int, 1)
	go func() { done <- Run([]string{"prestop", "--timeout=60s", "--heartbeat-wait=50s"}, env, &stderr) }()
	<-opened // the agent checked the signal dir and now reads the heartbeat

	moved := swapForSymlink(t, ckpt, component, victimRoot, victim)
	writeHeartbeat(t, victim, time.Now())
	writeHeartbeat(t, moved, time.Now())
	where := answerRequest(t, []string{moved, victim}, done)
	code := <-done
	if where == victim {
		t.Fatalf("the agent wrote its request through the swapped-in symlink into %s (exit %d)\n%s", victim, code, stderr.String())
	}
	if code != ExitOK || where != moved {
		t.Fatalf("exit %d, request in %q, want exit 0 and the request in the checked dir %s\n%s", code, where, moved, stderr.String())
	}
	if _, err := os.Lstat(filepath.Join(victim, requestFile)); !os.IsNotExist(err) {
		t.Fatalf("request.json in the link's target: %v", err)
	}
}

// swapForSymlink renames the component away and puts a symlink in its
// place; it returns where the checked signal dir now is.
func swapForSymlink(t *testing.T, ckpt, component, victimRoot, victim string) string {
	if component == ".trainguard" {
		must(t, os.Rename(filepath.Join(ckpt, ".trainguard"), filepath.Join(ckpt, ".trainguard.checked")))
		must(t, os.Symlink(victimRoot, filepath.Join(ckpt, ".trainguard")))
		return filepath.Join(ckpt, ".trainguard.checked", "pod-0")
	}
	parent := filepath.Join(ckpt, ".trainguard")
	must(t, os.Rename(filepath.Join(parent, "pod-0"), filepath.Join(parent, "pod-0.checked")))
	must(t, os.Symlink(victim, filepath.Join(parent, "pod-0")))
	return filepath.Join(parent, "pod-0.checked")
}

// answerRequest plays the trainer: it acknowledges the request in whichever
// directory it appears and returns that directory ("" if the agent ended first).
func answerRequest(t *testing.T, dirs []string, done chan int) string {
	for {
		for _, d := range dirs {
			b, err := os.ReadFile(filepath.Join(d, requestFile))
			if err != nil {
				continue
			}
			var req Request
			must(t, json.Unmarshal(b, &req))
			ack, err := json.Marshal(Ack{Generation: req.Generation, Nonce: req.Nonce, Status: "ok", Step: 1})
			must(t, err)
			must(t, os.WriteFile(filepath.Join(d, ".ack.tmp"), ack, 0o644))
			must(t, os.Rename(filepath.Join(d, ".ack.tmp"), filepath.Join(d, ackFile)))
			return d
		}
		select {
		case code := <-done:
			done <- code
			return ""
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func writeHeartbeat(t *testing.T, dir string, at time.Time) {
	b, err := json.Marshal(Heartbeat{PID: os.Getpid(), Time: unixSeconds(at), State: "training"})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, ".hb.tmp"), b, 0o644))
	must(t, os.Rename(filepath.Join(dir, ".hb.tmp"), filepath.Join(dir, heartbeatFile)))
}

// watchOpen returns a channel closed when name in dir is first opened.
func watchOpen(t *testing.T, dir, name string) <-chan struct{} {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	must(t, err)
	_, err = syscall.InotifyAddWatch(fd, dir, syscall.IN_OPEN)
	must(t, err)
	ch := make(chan struct{})
	var once sync.Once
	go func() {
		defer func() { _ = syscall.Close(fd) }() // test helper: nothing to report
		buf := make([]byte, 64<<10)
		for {
			n, err := syscall.Read(fd, buf)
			if err != nil {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				if strings.TrimRight(string(nameBytes), "\x00") == name {
					once.Do(func() { close(ch) })
					return
				}
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return ch
}
