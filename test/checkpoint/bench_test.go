package checkpoint_test

import (
	"os"
	"testing"
	"time"
)

// BenchmarkPrestopToAck100MB measures what a stopping pod pays: from the
// agent's start (preStop) to the trainer's acknowledgement, with ~100 MB of
// registered state (model + optimizer + a 100 MB tensor) saved with
// torch.save to local disk, fsynced. The trainer keeps training after each
// checkpoint (TRAINGUARD_AFTER_CHECKPOINT=continue) so that every iteration
// is a full save. It also reports the stripped agent binary's size.
//
//	go test ./test/checkpoint -run '^$' -bench PrestopToAck -benchtime 5x
func BenchmarkPrestopToAck100MB(b *testing.B) {
	p := newPod(b)
	tr := startTrainer(b, p, []string{"TRAINGUARD_AFTER_CHECKPOINT=continue"},
		"--steps", "100000000", "--step-delay", "0.01", "--state-mb", "100")
	tr.waitFor(`completed step 3 `, 60*time.Second)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := runAgent(b, p, "prestop", "--timeout=60s")
		if r.code != exitOK {
			b.Fatalf("prestop exit %d: %s", r.code, r.stderr)
		}
	}
	b.StopTimer()
	fi, err := os.Stat(world.agent)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size()), "agent-bytes")
}
