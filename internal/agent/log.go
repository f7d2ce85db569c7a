package agent

import (
	"fmt"
	"io"
	"time"
)

// eventLog writes every outcome to stderr (kubelet shows it in events when
// the hook fails) and appends it to a log file on the checkpoint volume,
// which survives the pod so that whoever investigates a lost checkpoint can
// read what happened. The file is reached through the checkpoint directory's
// descriptor, never by path.
type eventLog struct {
	stderr  io.Writer
	dir     *dirFD // nil: the directory could not be opened (fileErr says why)
	name    string
	prefix  string
	fileErr error // first failure to append; reported once, then the file is skipped
}

// newEventLog logs into name in dir; with dir nil (dirErr says why) to stderr only.
func newEventLog(stderr io.Writer, dir *dirFD, dirErr error, name, prefix string) *eventLog {
	l := &eventLog{stderr: stderr, dir: dir, name: name, prefix: prefix}
	if dir == nil {
		l.fileErr = dirErr
		fmt.Fprintf(stderr, "trainguard-agent: cannot append to %s in the checkpoint dir (logging to stderr only): %v\n", name, dirErr)
	}
	return l
}

func (l *eventLog) printf(format string, a ...any) {
	line := time.Now().Format("2006-01-02 15:04:05.000") + " " + l.prefix + fmt.Sprintf(format, a...) + "\n"
	_, _ = io.WriteString(l.stderr, line) // stderr is the last resort: nowhere to report its failure
	if l.fileErr != nil {
		return
	}
	if err := appendLine(l.dir, l.name, line); err != nil {
		l.fileErr = err
		fmt.Fprintf(l.stderr, "trainguard-agent: cannot append to %s (logging to stderr only): %v\n", l.dir.join(l.name), err)
	}
}

// appendLine opens the file per line so that concurrent agents (one per pod
// on a shared volume) interleave whole lines rather than clobbering each other.
// It never follows a symlink: a link planted in place of the log must not
// make the agent append to a file the link points at.
func appendLine(dir *dirFD, name, line string) error {
	f, err := dir.openAppend(name)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, line); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	return f.Close()
}
