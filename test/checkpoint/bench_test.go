package checkpoint_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"syscall"
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
//	go test ./test/checkpoint -run '^$' -bench CheckpointVsRawSave -benchtime 1x
//	hack/bench-checkpoint.sh   # the same, printed as a table
func BenchmarkCheckpointVsRawSave(b *testing.B) {
	for _, mb := range []int{100, 1024} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) { benchCheckpointVsRaw(b, mb) })
	}
}

var rawSaveRE = regexp.MustCompile(`raw save \d+: ([0-9.]+) ms`)

// benchRuns is how many raw saves and preStops are measured per size,
// interleaved (raw, preStop, raw, ...) so that both meet the same disk.
func benchRuns() int {
	if n, err := strconv.Atoi(os.Getenv("TRAINGUARD_BENCH_RUNS")); err == nil && n > 0 {
		return n
	}
	return 5
}

func benchCheckpointVsRaw(b *testing.B, mb int) {
	p := newPod(b)
	state := strconv.Itoa(mb)
	tr := startTrainer(b, p, []string{"TRAINGUARD_AFTER_CHECKPOINT=continue"},
		"--steps", "100000000", "--step-delay", "0.005", "--state-mb", state)
	tr.waitFor(`completed step 3 `, 5*time.Minute)
	b.ResetTimer()
	var rawMS, prestopMS []float64
	for i := 0; i < benchRuns()*b.N; i++ {
		// The trainer is stopped while the baseline runs, so the baseline
		// has the CPU to itself as the trainer has it during its own save.
		tr.signal(syscall.SIGSTOP)
		rawMS = append(rawMS, rawSave(b, p, state))
		tr.signal(syscall.SIGCONT)
		waitFreshHeartbeat(b, p)
		syscall.Sync() // start from clean page-cache writeback, as the baseline did
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

// rawSave runs the baseline once in its own process (the example trainer
// with --bench-raw-save: same model, optimizer, metrics and tensor, same
// directory) and returns the time of its torch.save + fsync alone.
func rawSave(b *testing.B, p pod, state string) float64 {
	b.StopTimer()
	defer b.StartTimer()
	raw := startTrainer(b, p, nil, "--state-mb", state, "--bench-raw-save", "1", "--bench-raw-sync")
	if err := raw.wait(10 * time.Minute); err != nil {
		b.Fatalf("raw save baseline: %v\n%s", err, raw.out.String())
	}
	m := rawSaveRE.FindStringSubmatch(raw.out.String())
	if m == nil {
		b.Fatalf("no raw save time in:\n%s", raw.out.String())
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// waitFreshHeartbeat waits until the (resumed) trainer has heartbeated
// again, so the agent's measured time does not include a stale-heartbeat wait.
func waitFreshHeartbeat(b *testing.B, p pod) {
	since := float64(time.Now().UnixNano()) / 1e9
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		raw, err := os.ReadFile(filepath.Join(p.signalDir, "heartbeat.json"))
		var hb struct {
			Time float64 `json:"time"`
		}
		if err == nil && json.Unmarshal(raw, &hb) == nil && hb.Time >= since {
			return
		}
	}
	b.Fatal("the trainer did not heartbeat within 30s of SIGCONT")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
