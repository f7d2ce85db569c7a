// Package agent is trainguard-agent: the small static binary that runs inside
// training pods. Its preStop subcommand asks the trainer (through the Python
// SDK) to checkpoint and waits, bounded, for the acknowledgement; see
// docs/checkpoint-protocol.md. It uses the standard library and golang.org/x/sys/unix
// (openat and friends, for descriptor-relative file access) only, so that the
// binary stays small enough to be copied into every pod by an init container.
package agent

import (
	"fmt"
	"io"
)

// Version is the release the agent belongs to. The agent reaches nothing
// else of trainguard (it ships alone into every pod), so it keeps its own
// copy of version.AppVersion, stamped by the same -ldflags (the Makefile's
// VERSION); a test in test/install holds the two equal.
var Version = "0.1.0" // set by -ldflags -X

// Exit codes of trainguard-agent. Kubernetes ignores a preStop hook's exit
// code for termination but records it in the pod's events, so the codes are
// for humans reading events and for tests.
const (
	ExitOK            = 0 // checkpoint acknowledged (and the chained hook, if any, succeeded)
	ExitError         = 1 // install failed, or another internal error
	ExitUsage         = 2 // unknown flag, bad value or unknown subcommand
	ExitNoTrainer     = 3 // no fresh heartbeat: no trainer is listening in this pod
	ExitTimeout       = 4 // trainer alive but no acknowledgement within the checkpoint budget
	ExitTrainerFailed = 5 // the trainer acknowledged with status "error" (e.g. disk full)
	ExitHookFailed    = 6 // chained httpGet/sleep hook failed, or exec hook could not run or was killed
	ExitTrainerGone   = 7 // the trainer process exited while the agent waited
	ExitIO            = 8 // the agent could not write its request (read-only or full volume)
)

// Env looks up an environment variable; os.Getenv in production, a map in tests.
type Env func(string) string

const usage = `usage: trainguard-agent <command> [flags]

commands:
  install DIR    copy this executable to DIR/trainguard-agent (atomic, mode 0755)
  prestop        ask the trainer to checkpoint, wait for the acknowledgement,
                 then run the chained user hook (see prestop -h)
  poststart      append a start line to <checkpoint dir>/postStart.log
  version        print the version (the agent comes from trainguard's image
                 and must match the webhook that injected it)
`

// Run executes one trainguard-agent command and returns the process exit code.
func Run(args []string, env Env, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "install":
		return runInstall(args[1:], stderr)
	case "prestop":
		return runPrestop(args[1:], env, stderr)
	case "poststart":
		return runPoststart(args[1:], env, stderr)
	case "version", "--version":
		// On stderr like everything the agent prints: stdout is the
		// container's, and kubectl exec shows both.
		fmt.Fprintf(stderr, "trainguard-agent %s\n", Version)
		return ExitOK
	case "-h", "--help", "help":
		fmt.Fprint(stderr, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "trainguard-agent: unknown command %q\n%s", args[0], usage)
		return ExitUsage
	}
}
