package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/trainguard/trainguard/internal/foundations/strictjson"
)

// CheckpointOutcomePrefix starts trainguard-agent's line in a container's
// termination message (the JSON outcome follows on the same line).
const CheckpointOutcomePrefix = "trainguard.io/checkpoint "

// Bounds on a termination message: the kubelet keeps at most 4096 bytes of
// one, and the agent's line is far shorter than MaxCheckpointOutcomeLine.
const (
	maxTerminationMessage    = 4096
	MaxCheckpointOutcomeLine = 512
)

// CheckpointOutcomeLine returns the last line of a termination message that
// starts with CheckpointOutcomePrefix, or "" when there is none. A user's
// own message may share the file; the agent appends when the hook ends, so
// the last prefixed line wins. Only the message's tail is read (as the
// kubelet keeps it), and an overlong line is cut one byte past the limit so
// that a parser still sees it is too long. The rescheduler's pod cache keeps
// only this line of each message, so memory stays bounded.
func CheckpointOutcomeLine(message string) string {
	return lastLine(message, CheckpointOutcomePrefix, MaxCheckpointOutcomeLine)
}

// InProcessRestartsPrefix starts the SDK supervisor's line in a container's
// termination message: "trainguard.io/inprocess-restarts <n>", how often it
// started the trainer again inside this run of the container
// (docs/checkpoint-protocol.md, "In-process recovery").
const InProcessRestartsPrefix = "trainguard.io/inprocess-restarts "

// maxInProcessRestarts bounds the count read: the cap is at most 1000.
const maxInProcessRestarts = 1000

// InProcessRestartsLine returns the supervisor's last line of message, or "".
func InProcessRestartsLine(message string) string {
	return lastLine(message, InProcessRestartsPrefix, len(InProcessRestartsPrefix)+8)
}

// InProcessRestarts is the count in message's supervisor line: 0 without
// one or for anything but a whole number, at most 1000. The line is the
// container's to write: a tenant can only make its own job reach its cap
// sooner, or hide restarts its own code could as well have made by itself.
func InProcessRestarts(message string) int {
	line := InProcessRestartsLine(message)
	n, err := strconv.Atoi(strings.TrimPrefix(line, InProcessRestartsPrefix))
	if line == "" || err != nil || n < 0 {
		return 0
	}
	return min(n, maxInProcessRestarts)
}

// lastLine is the last line of message's tail (as the kubelet keeps it)
// that starts with prefix, cut one byte past limit so that a parser still
// sees it is too long.
func lastLine(message, prefix string, limit int) string {
	if len(message) > maxTerminationMessage {
		message = message[len(message)-maxTerminationMessage:]
	}
	for message != "" {
		i := strings.LastIndexByte(message, '\n')
		line := strings.TrimRight(message[i+1:], "\r")
		if strings.HasPrefix(line, prefix) {
			if len(line) > limit+1 {
				line = line[:limit+1]
			}
			return line
		}
		if i < 0 {
			break
		}
		message = message[:i]
	}
	return ""
}

// Checkpoint outcomes the agent reports.
const (
	OutcomeSaved     = "saved"
	OutcomeTimeout   = "timeout"
	OutcomeNoTrainer = "no-trainer"
	OutcomeFailed    = "failed"
)

// CheckpointOutcomes lists every outcome, in the order metrics are initialised.
func CheckpointOutcomes() []string {
	return []string{OutcomeSaved, OutcomeTimeout, OutcomeNoTrainer, OutcomeFailed}
}

// maxOutcomeSeconds is a day: no preStop hook runs that long, so a larger
// figure is garbage, not a slow checkpoint.
const maxOutcomeSeconds = 86400

// CheckpointOutcome is one preStop checkpoint's result, as the agent writes
// it after CheckpointOutcomePrefix. Everything in a termination message is
// written by the tenant's container (the agent runs there, and so does the
// user's code), so ParseCheckpointOutcome reads it as hostile input.
type CheckpointOutcome struct {
	Outcome string  `json:"outcome"`
	Step    int64   `json:"step"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

// outcomeWire has pointer fields so a missing field is told apart from a zero.
type outcomeWire struct {
	Outcome *string  `json:"outcome"`
	Step    *int64   `json:"step"`
	Bytes   *int64   `json:"bytes"`
	Seconds *float64 `json:"seconds"`
}

// ErrNoCheckpointOutcome means the message holds no line with
// CheckpointOutcomePrefix: the container ran no trainguard preStop hook (or
// an agent that predates outcomes). It is not an error worth a log line.
var ErrNoCheckpointOutcome = errors.New("no checkpoint outcome line")

// ParseCheckpointOutcome finds the agent's line in a termination message
// (CheckpointOutcomeLine) and decodes it strictly: one JSON object, no
// unknown or missing fields, integers where integers belong, an outcome
// from the fixed set, and non-negative, finite, bounded numbers.
func ParseCheckpointOutcome(message string) (CheckpointOutcome, error) {
	line := CheckpointOutcomeLine(message)
	if line == "" {
		return CheckpointOutcome{}, ErrNoCheckpointOutcome
	}
	if len(line) > MaxCheckpointOutcomeLine {
		return CheckpointOutcome{}, fmt.Errorf("checkpoint outcome line is %d bytes, more than %d", len(line), MaxCheckpointOutcomeLine)
	}
	var w outcomeWire
	if err := strictjson.DecodeOne(strings.NewReader(strings.TrimPrefix(line, CheckpointOutcomePrefix)), &w); err != nil {
		return CheckpointOutcome{}, fmt.Errorf("checkpoint outcome: %w", err)
	}
	if w.Outcome == nil || w.Step == nil || w.Bytes == nil || w.Seconds == nil {
		return CheckpointOutcome{}, errors.New("checkpoint outcome: outcome, step, bytes and seconds are all required")
	}
	o := CheckpointOutcome{Outcome: *w.Outcome, Step: *w.Step, Bytes: *w.Bytes, Seconds: *w.Seconds}
	return o, o.validate()
}

func (o CheckpointOutcome) validate() error {
	known := false
	for _, k := range CheckpointOutcomes() {
		known = known || o.Outcome == k
	}
	switch {
	case !known:
		return fmt.Errorf("checkpoint outcome: outcome %q is not one of %s", truncate(o.Outcome, 32), strings.Join(CheckpointOutcomes(), ", "))
	case o.Step < 0:
		return fmt.Errorf("checkpoint outcome: step %d is negative", o.Step)
	case o.Bytes < 0:
		return fmt.Errorf("checkpoint outcome: bytes %d is negative", o.Bytes)
	case math.IsNaN(o.Seconds) || math.IsInf(o.Seconds, 0) || o.Seconds < 0 || o.Seconds > maxOutcomeSeconds:
		return fmt.Errorf("checkpoint outcome: seconds %v is not between 0 and %d", o.Seconds, maxOutcomeSeconds)
	}
	return nil
}

// Line renders o as the agent writes it (used by tests and documentation).
func (o CheckpointOutcome) Line() string {
	var b bytes.Buffer
	b.WriteString(CheckpointOutcomePrefix)
	_ = json.NewEncoder(&b).Encode(o) // cannot fail: plain fields
	return strings.TrimSuffix(b.String(), "\n")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// The trainer SDK's work-at-risk status (sdk/python/trainguard/_status.py):
// local rank 0 of every listening pod serves it on StatusPort (unless its
// TRAINGUARD_STATUS_PORT says otherwise), and the priority-boost controller
// reads it. Its body is the tenant's, read as hostile input. The same port
// takes POST CheckpointNowPath: commit the next completed step and train on
// (internal/foundations/trainerstatus, docs/checkpoint-protocol.md).
const (
	StatusPort        = 9602
	StatusPath        = "/trainguard/status"
	CheckpointNowPath = "/trainguard/checkpoint"
)
