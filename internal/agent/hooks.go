package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// runChainedHook runs the user's own preStop hook after the checkpoint step,
// whatever its outcome, within what is left of the overall timeout.
// An exec hook's non-zero exit code is returned as is.
func runChainedHook(ctx context.Context, h chainedHook, stderr io.Writer, log *eventLog) int {
	switch h.kind {
	case hookExec:
		return runExecHook(ctx, h.argv, stderr, log)
	case hookHTTP:
		return runHTTPHook(ctx, h, log)
	case hookSleep:
		return runSleepHook(ctx, h.sleep, log)
	}
	return ExitOK
}

func runExecHook(ctx context.Context, argv []string, stderr io.Writer, log *eventLog) int {
	log.printf("running chained exec hook %q", argv)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		log.printf("chained exec hook succeeded")
		return ExitOK
	case ctx.Err() != nil:
		log.printf("chained exec hook killed at the preStop timeout: %v", err)
		return ExitHookFailed
	case errors.As(err, &exitErr) && exitErr.ExitCode() > 0:
		log.printf("chained exec hook failed with exit code %d", exitErr.ExitCode())
		return exitErr.ExitCode()
	default:
		log.printf("chained exec hook could not run: %v", err)
		return ExitHookFailed
	}
}

func runHTTPHook(ctx context.Context, h chainedHook, log *eventLog) int {
	status, err := httpGet(ctx, h.url, h.headers)
	switch {
	case err != nil:
		log.printf("chained httpGet hook %s failed: %v", h.url, err)
		return ExitHookFailed
	case status < 200 || status >= 400:
		log.printf("chained httpGet hook %s answered %d", h.url, status)
		return ExitHookFailed
	}
	log.printf("chained httpGet hook %s answered %d", h.url, status)
	return ExitOK
}

func runSleepHook(ctx context.Context, d time.Duration, log *eventLog) int {
	deadline, _ := ctx.Deadline()
	if left := time.Until(deadline); d > left {
		log.printf("chained sleep hook cut from %s to %s to stay within the preStop timeout", d, left.Round(time.Millisecond))
		d = left
	}
	sleepCtx(ctx, d)
	log.printf("chained sleep hook slept %s", d.Round(time.Millisecond))
	return ExitOK
}

// httpGet is a minimal HTTP/1.1 GET. net/http would triple the agent's size
// (it drags in TLS and HTTP/2); a kubelet-style lifecycle GET needs only the
// status line. Plain http only, like the loopback endpoints these hooks hit.
func httpGet(ctx context.Context, rawURL string, headers []string) (int, error) {
	u, hostport, err := parseHTTPURL(rawURL)
	if err != nil {
		return 0, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close() }() // the response was read (or failed) before this
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return 0, fmt.Errorf("set deadline: %w", err)
		}
	}
	var b strings.Builder
	b.WriteString("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: trainguard-agent\r\nConnection: close\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return 0, fmt.Errorf("send request: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("read status line: %w", err)
	}
	return parseStatusLine(line)
}

func parseStatusLine(line string) (int, error) {
	parts := strings.Fields(line)
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "HTTP/") {
		return 0, fmt.Errorf("malformed status line %q", strings.TrimSpace(line))
	}
	code, err := strconv.Atoi(parts[1])
	if err != nil || code < 100 || code > 999 {
		return 0, fmt.Errorf("malformed status code in %q", strings.TrimSpace(line))
	}
	return code, nil
}

func parseHTTPURL(raw string) (*url.URL, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("--then-http-get: %w", err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, "", fmt.Errorf("--then-http-get=%q: need an http://host[:port]/path URL", raw)
	}
	hostport := u.Host
	if u.Port() == "" {
		hostport = net.JoinHostPort(u.Hostname(), "80")
	}
	return u, hostport, nil
}

// checkHeader refuses headers that would break or smuggle into the request.
func checkHeader(h string) error {
	name, _, ok := strings.Cut(h, ":")
	if !ok || strings.TrimSpace(name) == "" || strings.ContainsAny(h, "\r\n") || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("--then-http-header=%q: want 'Name: Value'", h)
	}
	return nil
}
