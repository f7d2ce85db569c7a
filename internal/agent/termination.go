package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"time"
)

// terminationPrefix starts the one line the agent appends to the container's
// termination message when its preStop ends; a reader in the webhook's
// observability code takes the last line with this prefix (see
// docs/checkpoint-protocol.md, "Termination message").
const terminationPrefix = "trainguard.io/checkpoint "

// terminationRecord is the line's JSON; field order is the documented format.
type terminationRecord struct {
	Outcome string  `json:"outcome"` // saved, timeout, no-trainer, failed
	Step    int64   `json:"step"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

// outcomeOf names the checkpoint step's exit code for the termination message.
func outcomeOf(code int) string {
	switch code {
	case ExitOK:
		return "saved"
	case ExitTimeout:
		return "timeout"
	case ExitNoTrainer:
		return "no-trainer"
	}
	return "failed"
}

// appendTerminationMessage appends the record to path. It never fails the
// hook: a problem is only logged. The line starts on a line of its own even
// when the file so far does not end with a newline (a user's own message).
func appendTerminationMessage(path string, res ckptResult, took time.Duration, log *eventLog) {
	if path == "" {
		return
	}
	rec := terminationRecord{Outcome: outcomeOf(res.code), Step: res.step, Bytes: res.bytes,
		Seconds: math.Round(took.Seconds()*1000) / 1000}
	b, err := json.Marshal(rec)
	if err == nil {
		err = appendRecord(path, terminationPrefix+string(b)+"\n")
	}
	if err != nil {
		log.printf("cannot append the checkpoint outcome to the termination message %s (ignored): %v", path, err)
	}
}

func appendRecord(path, line string) error {
	f, err := openAppendNoFollow(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // second Close after the checked one below is a no-op
	if needsNewline(f) {
		line = "\n" + line
	}
	if _, err := io.WriteString(f, line); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// needsNewline reports whether the file is non-empty and its last byte is not '\n'.
func needsNewline(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], fi.Size()-1); err != nil {
		return false
	}
	return last[0] != '\n'
}
