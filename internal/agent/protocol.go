package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"syscall"
	"time"
)

// File names inside a pod's signal dir. The Python SDK uses the same names
// (sdk/python/trainguard/_protocol.py); docs/checkpoint-protocol.md is the spec.
const (
	requestFile   = "request.json"
	ackFile       = "ack.json"
	heartbeatFile = "heartbeat.json"
	doneFile      = "done.json"
)

// Request is written by the agent. Times are Unix seconds (float) so that
// Python's time.time() reads them without parsing.
type Request struct {
	Generation int64 `json:"generation"`
	// Nonce is 128 random bits, new per request; only an ack that echoes it
	// counts, so an ack planted in advance or written for another request
	// (another job, an earlier pod) can never end the wait.
	Nonce string `json:"nonce"`
	Pod   string `json:"pod"`
	// PodUID is the requesting incarnation's: a pod recreated under the
	// same name (its old node partitioned, then back) shares the signal
	// dir, and only the incarnation the request names stops for it.
	PodUID      string  `json:"pod_uid,omitempty"`
	RequestedAt float64 `json:"requested_at"`
	// Deadline tells the trainer when the agent stops waiting: a request found
	// after its deadline (e.g. by a restarted trainer) is stale and ignored.
	Deadline float64 `json:"deadline"`
	AgentPID int     `json:"agent_pid"`
	// Expired is set when the agent gave up on the request (timeout, trainer
	// gone): it rewrites the request with its deadline moved to that moment,
	// so a restarted trainer does not answer a request nobody waits for.
	Expired bool `json:"expired,omitempty"`
}

// Done is written by the agent at the very end of its preStop, after the
// outcome is in the termination message: the trainer that acknowledged the
// request may exit now without killing the agent (and the outcome) with it
// when it is the container's PID 1.
type Done struct {
	Generation int64   `json:"generation"`
	Nonce      string  `json:"nonce"`
	Outcome    string  `json:"outcome"` // as in the termination message
	ExitCode   int     `json:"exit_code"`
	DoneAt     float64 `json:"done_at"`
}

// Ack is written by the trainer's rank 0 once the checkpoint is durable.
type Ack struct {
	Generation int64   `json:"generation"`
	Nonce      string  `json:"nonce"`
	Status     string  `json:"status"` // "ok" or "error"
	Step       int64   `json:"step"`
	Checkpoint string  `json:"checkpoint"`
	Bytes      int64   `json:"bytes"`
	Error      string  `json:"error,omitempty"`
	AckedAt    float64 `json:"acked_at"`
}

// Heartbeat is rewritten by the trainer every ~0.5 s while it listens.
type Heartbeat struct {
	PID        int     `json:"pid"`
	Time       float64 `json:"time"`
	State      string  `json:"state"` // training, saving, holding
	Step       int64   `json:"step"`
	Generation int64   `json:"generation"` // last generation the trainer handled
}

// maxGeneration bounds every generation in the protocol files: the largest
// integer every JSON reader (a float64) holds exactly, and more requests
// than any pod will ever see. A larger or negative value on the volume is
// forged (a writer of the volume planted it) and is ignored.
const maxGeneration = 1<<53 - 1

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func fromUnixSeconds(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// maxClockSkew is how far in the future a heartbeat may be dated and still
// count: the trainer writes it on the same node a moment earlier, so more
// than this is a forged or corrupt file, not a fresh trainer.
const maxClockSkew = time.Second

// age is how old the heartbeat is at now; negative when it is dated in the future.
func (h Heartbeat) age(now time.Time) time.Duration {
	return now.Sub(fromUnixSeconds(h.Time))
}

// fresh reports whether the heartbeat is recent enough, and not from the future.
func (h Heartbeat) fresh(now time.Time, maxAge time.Duration) bool {
	a := h.age(now)
	return a <= maxAge && a >= -maxClockSkew
}

// newNonce returns 128 random bits from the kernel in hex. It reads
// /dev/urandom rather than using crypto/rand, which would add ~190 KB to a
// binary copied into every pod, for the same kernel randomness.
func newNonce() (string, error) {
	f, err := os.Open("/dev/urandom")
	if err != nil {
		return "", fmt.Errorf("open /dev/urandom for the request nonce: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	var b [16]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return "", fmt.Errorf("read /dev/urandom for the request nonce: %w", err)
	}
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out), nil
}

// readJSON reads one protocol file of dir. A missing file is reported as
// os.ErrNotExist so callers can tell "not yet" from "corrupt".
func readJSON(dir *dirFD, name string, v any) error {
	b, err := dir.readFile(name)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parse %s: %w", dir.join(name), err)
	}
	return nil
}

func writeJSONAtomic(dir *dirFD, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", dir.join(name), err)
	}
	return dir.writeAtomic(name, append(b, '\n'))
}

// nextGeneration is one more than any generation visible in the signal dir,
// so a request is never confused with an earlier one, and an old ack (whose
// generation is at most the old request's) can never match the new request.
// Corrupt files count as generation 0: the others still bound it from below.
// A value outside [0, maxGeneration] is forged and ignored, and the result
// saturates at maxGeneration: a planted ack of 2^63-1 once made it negative.
// The nonce, not the generation, is what ties an ack to its request, so
// two requests of the saturated generation are still told apart.
func nextGeneration(signalDir *dirFD) int64 {
	var maxGen int64
	seen := func(g int64) {
		if g >= 0 && g <= maxGeneration {
			maxGen = max(maxGen, g)
		}
	}
	var req Request
	if readJSON(signalDir, requestFile, &req) == nil {
		seen(req.Generation)
	}
	var ack Ack
	if readJSON(signalDir, ackFile, &ack) == nil {
		seen(ack.Generation)
	}
	var hb Heartbeat
	if readJSON(signalDir, heartbeatFile, &hb) == nil {
		seen(hb.Generation)
	}
	return min(maxGen+1, maxGeneration)
}

// pidAlive reports whether a process with this pid exists in our PID
// namespace. The agent runs in the training container (preStop exec), so the
// trainer's pid from the heartbeat is meaningful here. EPERM means it exists.
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !isZombie(pid)
}

// isZombie catches a trainer that was killed but not yet reaped (a container
// whose PID 1 does not reap, or a test harness): kill(pid, 0) still succeeds.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
