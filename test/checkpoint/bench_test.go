package checkpoint_test

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"
)

// BenchmarkCheckpointVsRawSave measures, in the same run and on the same
// disk, what a stopping pod pays for its checkpoint (preStop → the trainer's
// acknowledgement, the agent's whole run) against the least any checkpoint
// costs: torch.save of the same registered state (model, Adam, metrics and
// an N MB tensor) into the same directory, flushed and fsynced. It reports
// the median of each and their ratio, and the stripped agent binary's size.
// The trainer keeps training after each checkpoint
// (TRAINGUARD_AFTER_CHECKPOINT=continue) so that every iteration is a full save.
//
//	go test ./test/checkpoint -run '^$' -bench CheckpointVsRawSave -benchtime 5x
//	hack/bench-checkpoint.sh   # the same, printed as a table
func BenchmarkCheckpointVsRawSave(b *testing.B) {
	for _, mb := range []int{100, 1024} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) { benchCheckpointVsRaw(b, mb) })
	}
}

var rawSaveRE = regexp.MustCompile(`raw save \d+: ([0-9.]+) ms`)

func benchCheckpointVsRaw(b *testing.B, mb int) {
	p := newPod(b)
	n := max(b.N, 3)
	state := strconv.Itoa(mb)
	raw := startTrainer(b, p, nil, "--state-mb", state, "--bench-raw-save", strconv.Itoa(n))
	if err := raw.wait(10 * time.Minute); err != nil {
		b.Fatalf("raw save baseline: %v\n%s", err, raw.out.String())
	}
	var rawMS []float64
	for _, m := range rawSaveRE.FindAllStringSubmatch(raw.out.String(), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		rawMS = append(rawMS, v)
	}
	if len(rawMS) != n {
		b.Fatalf("want %d raw saves, got %d:\n%s", n, len(rawMS), raw.out.String())
	}

	tr := startTrainer(b, p, []string{"TRAINGUARD_AFTER_CHECKPOINT=continue"},
		"--steps", "100000000", "--step-delay", "0.005", "--state-mb", state)
	tr.waitFor(`completed step 3 `, 5*time.Minute)
	b.ResetTimer()
	var prestopMS []float64
	for i := 0; i < n; i++ {
		r := runAgent(b, p, "prestop", "--timeout=600s")
		if r.code != exitOK {
			b.Fatalf("prestop exit %d: %s", r.code, r.stderr)
		}
		prestopMS = append(prestopMS, float64(r.elapsed.Microseconds())/1000)
	}
	b.StopTimer()
	rawMed, preMed := median(rawMS), median(prestopMS)
	b.ReportMetric(rawMed, "raw-save-ms")
	b.ReportMetric(preMed, "prestop-ack-ms")
	b.ReportMetric(preMed/rawMed, "ratio")
	if fi, err := os.Stat(world.agent); err == nil {
		b.ReportMetric(float64(fi.Size()), "agent-bytes")
	}
	b.Logf("%d MB: raw torch.save+fsync median %.1f ms %v; preStop→ack median %.1f ms %v; ratio %.2f×",
		mb, rawMed, rawMS, preMed, prestopMS, preMed/rawMed)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
