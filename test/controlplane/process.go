package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a child process (trainguard serve, KWOK) in its own process
// group, its output in a log file. The demo and the scale harness run the
// real binaries this way, as a cluster would, not in-process.
type Process struct {
	Cmd     *exec.Cmd
	LogPath string
	log     *os.File
	// Done is closed when the child has exited; Err is then its Wait error.
	Done chan struct{}
	Err  error
	once sync.Once
}

// StartProcess starts bin with args, env added to this process's
// environment, stdout and stderr into logPath.
func StartProcess(bin string, args, env []string, logPath string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close() // the start error is the one to report
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &Process{Cmd: cmd, LogPath: logPath, log: logFile, Done: make(chan struct{})}
	go func() { p.Err = cmd.Wait(); close(p.Done) }()
	return p, nil
}

// WaitHTTP polls url until it answers 200, the process exits, ctx ends or
// timeout passes.
func (p *Process) WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.After(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close() // drained above; nothing more to read
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.Done:
			return fmt.Errorf("%s exited before it was ready: %v", p.Cmd.Path, p.Err)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("%s not ready on %s within %s", p.Cmd.Path, url, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM to the child's process group, then SIGKILL after 15s.
func (p *Process) Stop() {
	p.once.Do(func() {
		defer func() { _ = p.log.Close() }() // the process wrote its last line; the log is only read after this
		pgid := p.Cmd.Process.Pid
		// Signal the group even if the child is gone, in case it left
		// anything behind; ESRCH is fine.
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.Done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.Done
		}
	})
}

// DumpLog prints the last 40 lines of the child's log, for failures.
func (p *Process) DumpLog(w io.Writer) {
	if p == nil {
		return
	}
	data, err := os.ReadFile(p.LogPath)
	if err != nil || len(data) == 0 {
		return
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	fmt.Fprintf(w, "---- last lines of %s ----\n", p.LogPath)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, "----")
}

// FreePort returns a loopback port nobody listens on.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }() // only the port number was wanted
	return l.Addr().(*net.TCPAddr).Port, nil
}
