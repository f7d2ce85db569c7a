package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Defaults of the prestop command; docs/checkpoint-protocol.md explains them.
const (
	defaultCheckpointDir  = "/checkpoint"
	defaultTimeout        = 60 * time.Second
	defaultHeartbeatAge   = 3 * time.Second
	defaultHeartbeatWait  = 3 * time.Second
	pollInterval          = 50 * time.Millisecond
	maxExecOrHTTPReserve  = 30 * time.Second
	signalSubdirOfCkptDir = ".trainguard"
)

type hookKind int

const (
	hookNone hookKind = iota
	hookExec
	hookHTTP
	hookSleep
)

// chainedHook is the user's own preStop hook, which the webhook moved into
// the agent's arguments so that it still runs after the checkpoint.
type chainedHook struct {
	kind    hookKind
	argv    []string
	url     string
	headers []string
	sleep   time.Duration
}

type prestopConfig struct {
	timeout       time.Duration
	checkpointDir string
	signalDir     string
	pod           string
	podUID        string
	heartbeatAge  time.Duration // a heartbeat older than this is not fresh
	heartbeatWait time.Duration // how long to wait for a first fresh heartbeat
	hook          chainedHook
	// terminationLog is the container's termination-message file; the
	// checkpoint outcome is appended to it ("" turns that off).
	terminationLog string
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ", ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// parsePrestop reads env defaults first, then flags, which override them.
// Everything after "--" is the chained exec hook.
func parsePrestop(args []string, env Env, stderr io.Writer) (prestopConfig, error) {
	flagArgs, execArgv := splitAtDoubleDash(args)
	cfg, err := prestopDefaults(env)
	if err != nil {
		return cfg, err
	}
	fs := flag.NewFlagSet("trainguard-agent prestop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "bound on the whole preStop: checkpoint wait plus chained hook (env TRAINGUARD_PRESTOP_TIMEOUT)")
	fs.StringVar(&cfg.checkpointDir, "checkpoint-dir", cfg.checkpointDir, "checkpoint volume; preStop.log is appended here (env TRAINGUARD_CHECKPOINT_DIR, MIGRATION_CKPT_PATH)")
	fs.StringVar(&cfg.signalDir, "signal-dir", cfg.signalDir, "this pod's signal dir (env TRAINGUARD_SIGNAL_DIR, MIGRATION_SIGNAL_PATH)")
	fs.StringVar(&cfg.pod, "pod", cfg.pod, "pod name for logs and the request (default: env TRAINGUARD_POD_NAME, else $HOSTNAME, else the host name)")
	// The default is this machine's host name when the env is unset (a
	// shell, not a pod): -h must not present it as the pod's name.
	fs.Lookup("pod").DefValue = ""
	fs.DurationVar(&cfg.heartbeatAge, "heartbeat-max-age", cfg.heartbeatAge, "a trainer heartbeat older than this is not fresh")
	fs.DurationVar(&cfg.heartbeatWait, "heartbeat-wait", cfg.heartbeatWait, "how long to wait for a fresh heartbeat before giving up")
	httpURL := fs.String("then-http-get", "", "after the checkpoint, GET this http:// URL (chained httpGet hook)")
	var headers stringList
	fs.Var(&headers, "then-http-header", "header 'Name: Value' for --then-http-get (repeatable)")
	sleep := fs.Duration("then-sleep", 0, "after the checkpoint, sleep this long (chained sleep hook)")
	fs.StringVar(&cfg.terminationLog, "termination-log", cfg.terminationLog, "append the checkpoint outcome to this file, the container's terminationMessagePath (env TRAINGUARD_TERMINATION_MESSAGE_PATH; empty: off)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: trainguard-agent prestop [flags] [-- user-command args...]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(flagArgs); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cfg, fmt.Errorf("unexpected argument %q (a chained command goes after --)", fs.Arg(0))
	}
	cfg.hook, err = buildHook(execArgv, *httpURL, headers, *sleep)
	if err != nil {
		return cfg, err
	}
	if cfg.signalDir == "" {
		cfg.signalDir = filepath.Join(cfg.checkpointDir, signalSubdirOfCkptDir, cfg.pod)
	}
	return cfg, validatePrestop(cfg)
}

func splitAtDoubleDash(args []string) (flags, rest []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return args, nil
}

func prestopDefaults(env Env) (prestopConfig, error) {
	cfg := prestopConfig{
		timeout:        defaultTimeout,
		checkpointDir:  firstNonEmpty(env("TRAINGUARD_CHECKPOINT_DIR"), env("MIGRATION_CKPT_PATH"), defaultCheckpointDir),
		signalDir:      firstNonEmpty(env("TRAINGUARD_SIGNAL_DIR"), env("MIGRATION_SIGNAL_PATH")),
		pod:            firstNonEmpty(env("TRAINGUARD_POD_NAME"), env("HOSTNAME"), hostname()),
		podUID:         env("TRAINGUARD_POD_UID"),
		heartbeatAge:   defaultHeartbeatAge,
		heartbeatWait:  defaultHeartbeatWait,
		terminationLog: env("TRAINGUARD_TERMINATION_MESSAGE_PATH"),
	}
	if v := env("TRAINGUARD_PRESTOP_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return cfg, fmt.Errorf("TRAINGUARD_PRESTOP_TIMEOUT=%q: %w", v, err)
		}
		cfg.timeout = d
	}
	return cfg, nil
}

func buildHook(argv []string, url string, headers []string, sleep time.Duration) (chainedHook, error) {
	set := 0
	h := chainedHook{}
	if len(argv) > 0 {
		set++
		h = chainedHook{kind: hookExec, argv: argv}
	}
	if url != "" {
		set++
		h = chainedHook{kind: hookHTTP, url: url, headers: headers}
	}
	if sleep != 0 {
		set++
		h = chainedHook{kind: hookSleep, sleep: sleep}
	}
	switch {
	case set > 1:
		return h, errors.New("at most one chained hook: -- command, --then-http-get or --then-sleep")
	case len(headers) > 0 && h.kind != hookHTTP:
		return h, errors.New("--then-http-header needs --then-http-get")
	case sleep < 0:
		return h, fmt.Errorf("--then-sleep=%s: must not be negative", sleep)
	}
	for _, hd := range headers {
		if err := checkHeader(hd); err != nil {
			return h, err
		}
	}
	if h.kind == hookHTTP {
		if _, _, err := parseHTTPURL(url); err != nil {
			return h, err
		}
	}
	return h, nil
}

func validatePrestop(cfg prestopConfig) error {
	switch {
	case cfg.timeout <= 0:
		return fmt.Errorf("--timeout=%s: must be positive", cfg.timeout)
	case cfg.heartbeatAge <= 0 || cfg.heartbeatWait < 0:
		return errors.New("--heartbeat-max-age must be positive and --heartbeat-wait not negative")
	case cfg.pod == "":
		return errors.New("no pod name: set TRAINGUARD_POD_NAME or --pod")
	}
	if err := checkDirAllowed("--checkpoint-dir", cfg.checkpointDir); err != nil {
		return err
	}
	return checkDirAllowed("--signal-dir", cfg.signalDir)
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// checkpointBudget splits the preStop timeout. The checkpoint wait gets the
// larger share because it is what the hook is for; the chained hook keeps a
// reserve so that the user's own shutdown still runs: a sleep hook keeps its
// duration (at most half the timeout), an exec or httpGet hook a quarter of
// the timeout (at most 30 s). The chained hook then runs until the overall
// deadline, so time the checkpoint did not use goes to the hook.
func checkpointBudget(total time.Duration, h chainedHook) time.Duration {
	var reserve time.Duration
	switch h.kind {
	case hookSleep:
		reserve = min(h.sleep, total/2)
	case hookExec, hookHTTP:
		reserve = min(total/4, maxExecOrHTTPReserve)
	}
	return total - reserve
}

func runPrestop(args []string, env Env, stderr io.Writer) int {
	cfg, err := parsePrestop(args, env, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK // asked for: -h is not a mistake
		}
		fmt.Fprintf(stderr, "trainguard-agent prestop: %v\n(usage: trainguard-agent prestop -h)\n", err)
		return ExitUsage
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(cfg.timeout))
	defer cancel()
	budget := checkpointBudget(cfg.timeout, cfg.hook)
	// Opened once: the log and the protocol reach the volume only through it.
	ckpt, ckptErr := openDirNoFollow(cfg.checkpointDir)
	defer ckpt.close()
	log := newEventLog(stderr, ckpt, ckptErr, "preStop.log", "trainguard-agent prestop pod="+cfg.pod+": ")
	log.printf("stop: preStop started, timeout %s (checkpoint wait up to %s), signal dir %s", cfg.timeout, budget, cfg.signalDir)

	ckptCtx, ckptCancel := context.WithDeadline(ctx, start.Add(budget))
	res := requestCheckpoint(ckptCtx, cfg, ckpt, ckptErr, log)
	defer res.close()
	ckptCancel()
	ckptTook := time.Since(start)
	code := res.code

	if cfg.hook.kind != hookNone {
		if hookCode := runChainedHook(ctx, cfg.hook, stderr, log); hookCode != ExitOK {
			code = hookCode
		}
	}
	log.printf("preStop finished: exit %d after %s", code, time.Since(start).Round(time.Millisecond))
	appendTerminationMessage(cfg.terminationLog, res, ckptTook, log)
	// Last: the trainer may exit once it reads this, and if it is the
	// container's PID 1 that ends this process too.
	signalDone(res, log)
	return code
}
