package contract

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCheckpointOutcome(t *testing.T) {
	saved := `trainguard.io/checkpoint {"outcome":"saved","step":1200,"bytes":3435973836,"seconds":12.5}`
	cases := []struct {
		name, msg string
		want      CheckpointOutcome
		err       string
	}{
		{name: "agent line alone", msg: saved, want: CheckpointOutcome{OutcomeSaved, 1200, 3435973836, 12.5}},
		{name: "after the user's own message", msg: "OOM in rank 3\nsee logs\n" + saved + "\n", want: CheckpointOutcome{OutcomeSaved, 1200, 3435973836, 12.5}},
		{name: "last line wins", msg: `trainguard.io/checkpoint {"outcome":"timeout","step":1,"bytes":0,"seconds":60}` + "\n" + saved, want: CheckpointOutcome{OutcomeSaved, 1200, 3435973836, 12.5}},
		{name: "user text after the agent line", msg: saved + "\nuser wrote this later", want: CheckpointOutcome{OutcomeSaved, 1200, 3435973836, 12.5}},
		{name: "CRLF", msg: saved + "\r\n", want: CheckpointOutcome{OutcomeSaved, 1200, 3435973836, 12.5}},
		{name: "every outcome: timeout", msg: `trainguard.io/checkpoint {"outcome":"timeout","step":7,"bytes":0,"seconds":60}`, want: CheckpointOutcome{OutcomeTimeout, 7, 0, 60}},
		{name: "every outcome: no-trainer", msg: `trainguard.io/checkpoint {"outcome":"no-trainer","step":0,"bytes":0,"seconds":0.1}`, want: CheckpointOutcome{OutcomeNoTrainer, 0, 0, 0.1}},
		{name: "every outcome: failed", msg: `trainguard.io/checkpoint {"outcome":"failed","step":3,"bytes":0,"seconds":2}`, want: CheckpointOutcome{OutcomeFailed, 3, 0, 2}},
		{name: "tail kept when longer than the kubelet's 4096 bytes", msg: strings.Repeat("x", 10000) + "\n" + saved, want: CheckpointOutcome{OutcomeSaved, 1200, 3435973836, 12.5}},
		{name: "no line", msg: "plain user message", err: ErrNoCheckpointOutcome.Error()},
		{name: "prefix not at line start", msg: "say " + saved, err: ErrNoCheckpointOutcome.Error()},
		{name: "empty", msg: "", err: ErrNoCheckpointOutcome.Error()},
		{name: "unknown outcome", msg: `trainguard.io/checkpoint {"outcome":"pwned","step":1,"bytes":1,"seconds":1}`, err: `outcome "pwned" is not one of`},
		{name: "unknown field", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1,"node":"x"}`, err: "unknown field"},
		{name: "missing field", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1}`, err: "all required"},
		{name: "negative step", msg: `trainguard.io/checkpoint {"outcome":"saved","step":-1,"bytes":1,"seconds":1}`, err: "step -1 is negative"},
		{name: "negative bytes", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":-5,"seconds":1}`, err: "bytes -5 is negative"},
		{name: "negative seconds", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":-1}`, err: "seconds -1"},
		{name: "absurd seconds", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1e300}`, err: "seconds 1e+300"},
		{name: "overflowing float", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1e400}`, err: "decoding JSON"},
		{name: "fractional step", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1.5,"bytes":1,"seconds":1}`, err: "decoding JSON"},
		{name: "string number", msg: `trainguard.io/checkpoint {"outcome":"saved","step":"1","bytes":1,"seconds":1}`, err: "decoding JSON"},
		{name: "NaN", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":NaN}`, err: "decoding JSON"},
		{name: "trailing data", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1} {}`, err: "trailing data"},
		{name: "array", msg: `trainguard.io/checkpoint [1,2]`, err: "decoding JSON"},
		{name: "null", msg: `trainguard.io/checkpoint null`, err: "all required"},
		{name: "overlong line", msg: `trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1}` + strings.Repeat(" ", 600), err: "more than 512"},
		{name: "truncated", msg: `trainguard.io/checkpoint {"outcome":"saved","st`, err: "decoding JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCheckpointOutcome(tc.msg)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCheckpointOutcomeLineRoundTrip(t *testing.T) {
	for _, name := range CheckpointOutcomes() {
		o := CheckpointOutcome{Outcome: name, Step: 42, Bytes: 1 << 30, Seconds: 3.25}
		got, err := ParseCheckpointOutcome("user text\n" + o.Line())
		require.NoError(t, err, o.Line())
		assert.Equal(t, o, got)
	}
}

// FuzzParseCheckpointOutcome: any message is either an outcome that validates or an error;
// never a panic.
func FuzzParseCheckpointOutcome(f *testing.F) {
	f.Add(`trainguard.io/checkpoint {"outcome":"saved","step":1,"bytes":1,"seconds":1}`)
	f.Add("x\ntrainguard.io/checkpoint {\"outcome\":\"timeout\"")
	f.Add("trainguard.io/checkpoint \n\n\r")
	f.Fuzz(func(t *testing.T, msg string) {
		o, err := ParseCheckpointOutcome(msg)
		if err == nil {
			require.NoError(t, o.validate())
		}
	})
}
