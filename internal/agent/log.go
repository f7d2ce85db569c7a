package agent

import (
	"fmt"
	"io"
	"path/filepath"
	"time"
)

// eventLog writes every outcome to stderr (kubelet shows it in events when
// the hook fails) and appends it to a log file on the checkpoint volume,
// which survives the pod so that whoever investigates a lost checkpoint can
// read what happened.
type eventLog struct {
	stderr  io.Writer
	file    string
	prefix  string
	fileErr error // first failure to append; reported once, then the file is skipped
}

func newEventLog(stderr io.Writer, dir, name, prefix string) *eventLog {
	return &eventLog{stderr: stderr, file: filepath.Join(dir, name), prefix: prefix}
}

func (l *eventLog) printf(format string, a ...any) {
	line := time.Now().Format("2006-01-02 15:04:05.000") + " " + l.prefix + fmt.Sprintf(format, a...) + "\n"
	_, _ = io.WriteString(l.stderr, line) // stderr is the last resort: nowhere to report its failure
	if l.fileErr != nil {
		return
	}
	if err := appendLine(l.file, line); err != nil {
		l.fileErr = err
		fmt.Fprintf(l.stderr, "trainguard-agent: cannot append to %s (logging to stderr only): %v\n", l.file, err)
	}
}

// appendLine opens the file per line so that concurrent agents (one per pod
// on a shared volume) interleave whole lines rather than clobbering each other.
// It never follows a symlink: a link planted in place of the log must not
// make the agent append to a file the link points at.
func appendLine(path, line string) error {
	f, err := openAppendNoFollow(path)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, line); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	return f.Close()
}
