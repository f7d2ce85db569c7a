package agent

import (
	"io"
	"os"
)

// runPoststart records the container start next to preStop.log, so that one
// look at the checkpoint volume shows each pod's lifetime.
func runPoststart(args []string, env Env, stderr io.Writer) int {
	if len(args) != 0 {
		_, _ = io.WriteString(stderr, "usage: trainguard-agent poststart\n") // console: nowhere better to report
		if len(args) == 1 && isHelp(args[0]) {
			return ExitOK
		}
		return ExitUsage
	}
	dir := firstNonEmpty(env("TRAINGUARD_CHECKPOINT_DIR"), env("MIGRATION_CKPT_PATH"), defaultCheckpointDir)
	pod := firstNonEmpty(env("TRAINGUARD_POD_NAME"), env("HOSTNAME"), hostname())
	d, err := openDirNoFollow(dir)
	defer d.close()
	log := newEventLog(stderr, d, err, "postStart.log", "trainguard-agent poststart pod="+pod+": ")
	log.printf("start: pid %d", os.Getpid())
	return ExitOK
}
