package contract

import (
	"strconv"
	"strings"
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

// The trainer SDK's work-at-risk status (sdk/python/trainguard/_status.py):
// local rank 0 of every listening pod serves it on StatusPort (unless its
// TRAINGUARD_STATUS_PORT says otherwise), and the priority-boost controller
// reads it. Its body is the tenant's, read as hostile input.
const (
	StatusPort = 9602
	StatusPath = "/trainguard/status"
)
