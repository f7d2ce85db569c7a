package checkpoint_test

import (
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkInProcessRestart measures, in one run, a SIGKILLed rank's way
// back under the supervisor (2 ranks, gloo, the example trainer), its new
// trainer started by fork() of the supervisor (torch imported once) and as
// a new process (TRAINGUARD_FORK=0, the path before), on an idle machine
// and beside two busy loops (one per core of the CI machine). Phases from
// the kill: the victim's supervisor sees the death; the new trainer's code
// runs (the fork path's own report); the new trainer has the state from
// the survivor's memory (after its imports, joining the group and the
// transfer); the survivor completes a step again. A benchmark, not an
// assertion: medians of TRAINGUARD_BENCH_RUNS (default 3) each.
//
//	go test ./test/checkpoint -run '^$' -bench InProcessRestart -benchtime 1x
func BenchmarkInProcessRestart(b *testing.B) {
	type row struct {
		load, path string
		phases     [4][]float64
	}
	var rows []row
	for _, busy := range []int{0, 2} {
		for _, fork := range []bool{true, false} {
			r := row{load: "idle", path: "fork, torch preloaded"}
			if busy > 0 {
				r.load = fmt.Sprintf("%d busy loops", busy)
			}
			if !fork {
				r.path = "new process (before)"
			}
			for i := 0; i < benchRuns()*b.N; i++ {
				ph := restartOnce(b, fork, busy)
				for k := range ph {
					r.phases[k] = append(r.phases[k], ph[k])
				}
			}
			rows = append(rows, r)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-13s %-22s %10s %12s %12s %14s   (s from the SIGKILL, median of %d)\n", "load", "restart",
		"exit seen", "code runs", "state in", "training again", benchRuns()*b.N)
	for _, r := range rows {
		fmt.Fprintf(&out, "%-13s %-22s", r.load, r.path)
		for k, w := range []int{10, 12, 12, 14} {
			if len(r.phases[k]) == 0 || r.phases[k][0] < 0 {
				fmt.Fprintf(&out, " %*s", w, "-")
				continue
			}
			fmt.Fprintf(&out, " %*.2f", w, median(r.phases[k]))
		}
		out.WriteString("\n")
	}
	b.Log(out.String())
}

// restartOnce runs one job, kills rank 1's trainer at step 30 and returns
// the seconds from the kill to each phase (-1: the phase does not exist on
// this path).
func restartOnce(b *testing.B, fork bool, busy int) [4]float64 {
	b.StopTimer()
	defer b.StartTimer()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < busy; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			for n := 0; ; n++ {
				if n%1_000_000 == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	extra := [2][]string{}
	if !fork {
		extra = [2][]string{{"TRAINGUARD_FORK=0"}, {"TRAINGUARD_FORK=0"}}
	}
	job := newRankPods(b)
	ranks := job.startSupervised(b, extra, "--steps", "100000", "--step-delay", "0.05", "--save-every", "100000")
	ranks[1].waitFor(`rank 1: completed step 30 `, 5*time.Minute)
	victimOut, survivorOut := len(ranks[1].out.String()), len(ranks[0].out.String())
	if err := syscall.Kill(trainerPid(b, job.pods[1]), syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	killed := time.Now()
	pats := []struct {
		p    *proc
		from int
		re   *regexp.Regexp
	}{
		{ranks[1], victimOut, regexp.MustCompile(`died of SIGKILL; starting it again`)},
		{ranks[1], victimOut, regexp.MustCompile(`forked the trainer \(pid \d+\)`)},
		{ranks[1], victimOut, regexp.MustCompile(`rank 1: resumed from peer:rank0`)},
		{ranks[0], survivorOut, regexp.MustCompile(`(?s)re-formed the group at generation.*rank 0: completed step`)},
	}
	var got [4]float64
	seen := 0
	for end := time.Now().Add(3 * time.Minute); seen < len(pats) && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		for k, p := range pats {
			if got[k] != 0 || (k == 1 && !fork) {
				continue
			}
			if p.re.MatchString(p.p.out.String()[p.from:]) {
				got[k] = time.Since(killed).Seconds()
				seen++
			}
		}
		if !fork && got[1] == 0 {
			got[1], seen = -1, seen+1
		}
	}
	if seen < len(pats) {
		b.Fatalf("the job did not train again within 3 minutes; victim:\n%s\nsurvivor:\n%s", ranks[1].out.String(), ranks[0].out.String())
	}
	for _, r := range ranks {
		r.signal(syscall.SIGKILL)
		<-r.done
	}
	return got
}
