package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mapEnv(m map[string]string) Env { return func(k string) string { return m[k] } }

func TestCheckpointBudgetLeavesTheChainedHookItsTurn(t *testing.T) {
	for _, tc := range []struct {
		total time.Duration
		hook  chainedHook
		want  time.Duration
	}{
		{60 * time.Second, chainedHook{}, 60 * time.Second},
		{60 * time.Second, chainedHook{kind: hookExec}, 45 * time.Second},
		{600 * time.Second, chainedHook{kind: hookHTTP}, 570 * time.Second},
		{60 * time.Second, chainedHook{kind: hookSleep, sleep: 5 * time.Second}, 55 * time.Second},
		{60 * time.Second, chainedHook{kind: hookSleep, sleep: time.Hour}, 30 * time.Second},
	} {
		if got := checkpointBudget(tc.total, tc.hook); got != tc.want {
			t.Errorf("checkpointBudget(%s, %+v) = %s, want %s", tc.total, tc.hook, got, tc.want)
		}
	}
}

func TestFlagsOverrideEnv(t *testing.T) {
	env := mapEnv(map[string]string{
		"TRAINGUARD_CHECKPOINT_DIR": "/ck", "TRAINGUARD_POD_NAME": "p", "TRAINGUARD_PRESTOP_TIMEOUT": "90s"})
	cfg, err := parsePrestop([]string{"--timeout=5s", "--", "echo", "--timeout=1s"}, env, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.timeout != 5*time.Second || cfg.signalDir != "/ck/.trainguard/p" || cfg.hook.kind != hookExec ||
		len(cfg.hook.argv) != 2 || cfg.hook.argv[1] != "--timeout=1s" {
		t.Fatalf("unexpected config %+v", cfg)
	}
	cfg, err = parsePrestop(nil, mapEnv(map[string]string{"MIGRATION_CKPT_PATH": "/m", "MIGRATION_SIGNAL_PATH": "/m/s",
		"TRAINGUARD_POD_NAME": "p"}), &bytes.Buffer{})
	if err != nil || cfg.checkpointDir != "/m" || cfg.signalDir != "/m/s" || cfg.timeout != defaultTimeout {
		t.Fatalf("migration env not honoured: %+v, %v", cfg, err)
	}
}

func TestBadUsage(t *testing.T) {
	env := mapEnv(map[string]string{"TRAINGUARD_POD_NAME": "p"})
	for _, args := range [][]string{
		{"--nope"}, {"--timeout=0s"}, {"--then-http-header=X: y"}, {"--then-http-get=http://h/", "--then-http-header=bad"},
		{"--then-sleep=-1s"},
	} {
		if _, err := parsePrestop(args, env, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	if code := Run([]string{"prestop", "--nope"}, env, &bytes.Buffer{}); code != ExitUsage {
		t.Errorf("unknown flag: exit %d, want %d", code, ExitUsage)
	}
}

func TestNextGenerationExceedsEverythingOnDisk(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	if g := nextGeneration(d); g != 1 {
		t.Fatalf("empty dir: generation %d", g)
	}
	must(t, writeJSONAtomic(d, requestFile, Request{Generation: 3}))
	must(t, writeJSONAtomic(d, ackFile, Ack{Generation: 7}))
	must(t, os.WriteFile(filepath.Join(dir, heartbeatFile), []byte("{corrupt"), 0o644))
	if g := nextGeneration(d); g != 8 {
		t.Fatalf("generation %d, want 8", g)
	}
}

// A file planted in the signal dir cannot push the next generation past
// the largest one (2^63-1 made it negative) or below the real ones: forged
// values outside [0, maxGeneration] are ignored, and the result saturates.
func TestNextGenerationIsBoundedAgainstPlantedFiles(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	must(t, writeJSONAtomic(d, requestFile, Request{Generation: 3}))
	for _, planted := range []int64{math.MaxInt64, maxGeneration + 1, -5} {
		must(t, writeJSONAtomic(d, ackFile, Ack{Generation: planted}))
		if g := nextGeneration(d); g != 4 {
			t.Errorf("ack of generation %d planted: next generation %d, want 4", planted, g)
		}
	}
	must(t, writeJSONAtomic(d, ackFile, Ack{Generation: maxGeneration}))
	if g := nextGeneration(d); g != maxGeneration {
		t.Errorf("ack at the largest generation: next %d, want %d (saturated)", g, int64(maxGeneration))
	}
}

func TestHTTPGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("A") != "b" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, err := httpGet(ctx, srv.URL+"/x", []string{"A: b"})
	if err != nil || code != http.StatusFound {
		t.Fatalf("got %d, %v", code, err)
	}
	code, err = httpGet(ctx, srv.URL+"/x", nil)
	if err != nil || code != http.StatusTeapot {
		t.Fatalf("got %d, %v", code, err)
	}
	if _, err := parseStatusLine("garbage\r\n"); err == nil {
		t.Fatal("malformed status line accepted")
	}
}

func TestPidAlive(t *testing.T) {
	if !pidAlive(os.Getpid()) || pidAlive(0) || pidAlive(1<<30) {
		t.Fatal("pidAlive is wrong about itself, 0 or a huge pid")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// An unanswered request is expired when the agent gives up, and done.json
// names the request and its outcome once the hook is over: written last,
// after the termination message, so a PID-1 trainer exiting on it cannot
// take the outcome with it.
func TestGiveUpExpiresTheRequestAndDoneComesLast(t *testing.T) {
	dir := t.TempDir()
	sigPath := filepath.Join(dir, ".trainguard", "p")
	must(t, os.MkdirAll(sigPath, 0o755))
	hb := Heartbeat{PID: os.Getpid()}
	// A trainer that heartbeats (this process) but never answers.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			hb.Time = unixSeconds(time.Now())
			b, _ := json.Marshal(hb)
			_ = os.WriteFile(filepath.Join(sigPath, heartbeatFile+".tmp"), b, 0o644)
			_ = os.Rename(filepath.Join(sigPath, heartbeatFile+".tmp"), filepath.Join(sigPath, heartbeatFile))
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	termLog := filepath.Join(dir, "termination-log")
	env := mapEnv(map[string]string{"TRAINGUARD_CHECKPOINT_DIR": dir, "TRAINGUARD_POD_NAME": "p",
		"TRAINGUARD_POD_UID": "uid-1", "TRAINGUARD_TERMINATION_MESSAGE_PATH": termLog})
	if code := Run([]string{"prestop", "--timeout=300ms"}, env, &bytes.Buffer{}); code != ExitTimeout {
		t.Fatalf("exit %d, want %d", code, ExitTimeout)
	}
	var req Request
	must(t, readJSONPath(filepath.Join(sigPath, requestFile), &req))
	if req.Pod != "p" || req.PodUID != "uid-1" {
		t.Fatalf("the request names pod %q uid %q, want p uid-1: a replacement of the same name would stop for it", req.Pod, req.PodUID)
	}
	if !req.Expired || req.Deadline > unixSeconds(time.Now()) {
		t.Fatalf("request not expired: %+v", req)
	}
	var done Done
	must(t, readJSONPath(filepath.Join(sigPath, doneFile), &done))
	if done.Generation != req.Generation || done.Nonce != req.Nonce || done.Outcome != "timeout" || done.ExitCode != ExitTimeout {
		t.Fatalf("done %+v does not name request %+v and its outcome", done, req)
	}
	logged, err := os.Stat(termLog)
	must(t, err)
	fi, err := os.Stat(filepath.Join(sigPath, doneFile))
	must(t, err)
	if fi.ModTime().Before(logged.ModTime()) {
		t.Fatalf("done.json (%s) written before the termination message (%s)", fi.ModTime(), logged.ModTime())
	}
}

func readJSONPath(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// TestHelpAndVersion: asking for help is not a usage error, -h never shows
// this machine's host name as the pod's, and the agent says its version
// (it must match the webhook that injected it).
func TestHelpAndVersion(t *testing.T) {
	env := mapEnv(map[string]string{})
	for _, args := range [][]string{{"prestop", "-h"}, {"prestop", "--help"}, {"install", "--help"}, {"poststart", "-h"}, {"--help"}} {
		var out bytes.Buffer
		if code := Run(args, env, &out); code != ExitOK {
			t.Errorf("%v: exit %d, want %d: %s", args, code, ExitOK, out.String())
		}
		if !strings.Contains(out.String(), "usage: trainguard-agent") {
			t.Errorf("%v: no usage: %s", args, out.String())
		}
	}
	var out bytes.Buffer
	Run([]string{"prestop", "-h"}, env, &out)
	if host, _ := os.Hostname(); host != "" && strings.Contains(out.String(), fmt.Sprintf("(default %q)", host)) {
		t.Errorf("prestop -h shows the host name %q as the pod's default:\n%s", host, out.String())
	}
	out.Reset()
	if code := Run([]string{"version"}, env, &out); code != ExitOK || out.String() != "trainguard-agent "+Version+"\n" {
		t.Errorf("version: exit %d, %q", code, out.String())
	}
}
