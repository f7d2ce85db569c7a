// Package outcome carries each stopping training pod's checkpoint outcome
// out of the pod. trainguard-agent's preStop hook appends one line to the
// container's termination-message file; the kubelet copies that file into
// the pod status; this package reads it from the status of terminated
// managed pods and turns it into an Event on the pod and on its job, and
// into the trainguard_checkpoint_* metrics.
//
// Everything in a termination message is written by the tenant's container
// (the agent runs there, and so does the user's code), so it is parsed as
// hostile input: bounded, strictly decoded, from a fixed vocabulary.
package outcome

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/strictjson"
)

// LinePrefix starts the agent's line in the termination message. The JSON
// object follows it on the same line.
const LinePrefix = contract.CheckpointOutcomePrefix

// Outcomes the agent reports.
const (
	Saved     = "saved"
	Timeout   = "timeout"
	NoTrainer = "no-trainer"
	Failed    = "failed"
)

// Outcomes lists every outcome, in the order metrics are initialised.
func Outcomes() []string { return []string{Saved, Timeout, NoTrainer, Failed} }

// Bounds on what is read (contract.CheckpointOutcomeLine reads only the
// message's tail, as the kubelet keeps it).
const (
	maxLine = contract.MaxCheckpointOutcomeLine
	// maxSeconds is a day: no preStop hook runs that long, so a larger
	// figure is garbage, not a slow checkpoint.
	maxSeconds = 86400
)

// Outcome is one preStop checkpoint's result.
type Outcome struct {
	Outcome string  `json:"outcome"`
	Step    int64   `json:"step"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

// wire has pointer fields so a missing field is told apart from a zero.
type wire struct {
	Outcome *string  `json:"outcome"`
	Step    *int64   `json:"step"`
	Bytes   *int64   `json:"bytes"`
	Seconds *float64 `json:"seconds"`
}

// ErrNoOutcome means the message holds no line with LinePrefix: the
// container ran no trainguard preStop hook (or an agent that predates
// outcomes). It is not an error worth a log line.
var ErrNoOutcome = errors.New("no checkpoint outcome line")

// Parse finds the last line starting with LinePrefix in a termination
// message and decodes it. A user's own message may share the file: lines
// without the prefix are ignored, and the last prefixed line wins because
// the agent appends when the hook ends.
func Parse(message string) (Outcome, error) {
	line := contract.CheckpointOutcomeLine(message)
	if line == "" {
		return Outcome{}, ErrNoOutcome
	}
	if len(line) > maxLine {
		return Outcome{}, fmt.Errorf("checkpoint outcome line is %d bytes, more than %d", len(line), maxLine)
	}
	return decode(strings.TrimPrefix(line, LinePrefix))
}

// decode is strict: one JSON object, no unknown or missing fields, integers
// where integers belong, an outcome from the fixed set, and non-negative,
// finite, bounded numbers.
func decode(body string) (Outcome, error) {
	var w wire
	if err := strictjson.DecodeOne(strings.NewReader(body), &w); err != nil {
		return Outcome{}, fmt.Errorf("checkpoint outcome: %w", err)
	}
	if w.Outcome == nil || w.Step == nil || w.Bytes == nil || w.Seconds == nil {
		return Outcome{}, errors.New("checkpoint outcome: outcome, step, bytes and seconds are all required")
	}
	o := Outcome{Outcome: *w.Outcome, Step: *w.Step, Bytes: *w.Bytes, Seconds: *w.Seconds}
	return o, o.validate()
}

func (o Outcome) validate() error {
	known := false
	for _, k := range Outcomes() {
		known = known || o.Outcome == k
	}
	switch {
	case !known:
		return fmt.Errorf("checkpoint outcome: outcome %q is not one of %s", truncate(o.Outcome, 32), strings.Join(Outcomes(), ", "))
	case o.Step < 0:
		return fmt.Errorf("checkpoint outcome: step %d is negative", o.Step)
	case o.Bytes < 0:
		return fmt.Errorf("checkpoint outcome: bytes %d is negative", o.Bytes)
	case math.IsNaN(o.Seconds) || math.IsInf(o.Seconds, 0) || o.Seconds < 0 || o.Seconds > maxSeconds:
		return fmt.Errorf("checkpoint outcome: seconds %v is not between 0 and %d", o.Seconds, maxSeconds)
	}
	return nil
}

// Line renders o as the agent writes it (used by tests and documentation).
func (o Outcome) Line() string {
	var b bytes.Buffer
	b.WriteString(LinePrefix)
	_ = json.NewEncoder(&b).Encode(o) // cannot fail: plain fields
	return strings.TrimSuffix(b.String(), "\n")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
