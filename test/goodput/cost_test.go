package goodput

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// sec is t0 plus s seconds.
func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// containerAt is a job pod as the API returns it: the training container
// running since started (zero: waiting for reason), after restarts
// restarts, the container before it started at lastStarted and exited
// lastExit. The API's times have whole seconds.
func containerAt(uid string, created time.Time, restarts int32, started time.Time, reason string, lastStarted time.Time, lastExit int32) *corev1.Pod {
	whole := func(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }
	cs := corev1.ContainerStatus{Name: "pytorch", RestartCount: restarts}
	if started.IsZero() {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
	} else {
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: whole(started)}
	}
	if restarts > 0 {
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: lastExit, StartedAt: whole(lastStarted)}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "goodput-master-0", UID: types.UID(uid), CreationTimestamp: whole(created)},
		Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{cs}},
	}
}

// poll samples pod every 2 s from from to to (the harness's polling).
func poll(pod *corev1.Pod, from, to float64) []PodSample {
	var out []PodSample
	for s := from; s < to; s += 2 {
		out = append(out, SampleOf(pod, "pytorch", sec(s)))
	}
	return out
}

// The plain arm's rank exception: the kubelet restarts rank 0's container
// (exit 1) at once; the trainer imports torch, meets its peer again and
// resumes from its step-80 checkpoint: 20 steps done again.
func TestCostOfARestartInPlaceSplitsDetectionRestartAndRecompute(t *testing.T) {
	lines := logOf(t0, 1, 100) // steps 1..100 at 0..99 s
	lines = append(lines,
		sec(110).Format(time.RFC3339Nano)+" rank 0: resumed from /checkpoint/ckpt-000000080.pt at step 80, metrics {'step': 80, 'loss': 0.0125}",
		sec(110.2).Format(time.RFC3339Nano)+" rank 1: resumed from /checkpoint/ckpt-000000080.pt at step 80, metrics {'step': 80, 'loss': 0.0125}")
	lines = append(lines, logOf(sec(112), 81, 150)...)
	created := sec(-30)
	pods := poll(containerAt("a", created, 0, sec(-28), "", time.Time{}, 0), 0, 100)
	pods = append(pods, poll(containerAt("a", created, 1, sec(101), "", sec(-28), 1), 102, 180)...)
	tl := NewTimeline(lines, pods)
	step := tl.Series.StepTime()
	require.Equal(t, time.Second, step)

	c := CostOf(tl, step, sec(100.5), sec(180))
	assert.True(t, c.Replaced)
	assert.True(t, c.Trained)
	assert.Equal(t, 500*time.Millisecond, c.Detection, "the exception → the container's restart")
	assert.Equal(t, 11*time.Second, c.Restart, "the container's start → the first step after the resume")
	assert.Equal(t, 20*time.Second, c.Recompute, "steps 81..100 again")
	assert.Equal(t, 31500*time.Millisecond, c.Total())
	assert.Equal(t, 1, c.Restarts)
	assert.Equal(t, []int32{1}, c.Exits)
	assert.Zero(t, c.BackOff)
	assert.Equal(t, "0.5s + 11.0s + 20.0s = 31.5s; restarts 1 (exit 1)", c.String())
}

// A container in crash-loop back-off: restarted from exit 1, dead again
// (exit 1) before it resumed, waiting in CrashLoopBackOff for the samples
// from 110 s to 120 s, started again at 119 s.
func TestCostOfCountsTheKubeletsRestartsAndBackOff(t *testing.T) {
	lines := logOf(t0, 1, 100)
	lines = append(lines, sec(125).Format(time.RFC3339Nano)+" rank 0: resumed from /checkpoint/ckpt-000000100.pt at step 100, metrics {'step': 100, 'loss': 0.01}")
	lines = append(lines, logOf(sec(127), 101, 150)...)
	created := sec(-30)
	pods := poll(containerAt("a", created, 0, sec(-28), "", time.Time{}, 0), 0, 100)
	pods = append(pods, poll(containerAt("a", created, 1, sec(101), "", sec(-28), 1), 102, 110)...)
	pods = append(pods, poll(containerAt("a", created, 1, time.Time{}, "CrashLoopBackOff", sec(101), 1), 110, 120)...)
	pods = append(pods, poll(containerAt("a", created, 2, sec(119), "", sec(101), 1), 120, 180)...)
	c := CostOf(NewTimeline(lines, pods), time.Second, sec(100.5), sec(180))
	assert.Equal(t, 2, c.Restarts)
	assert.Equal(t, []int32{1}, c.Exits)
	assert.Equal(t, 10*time.Second, c.BackOff)
	assert.Equal(t, "0.5s + 26.0s + 0.0s = 26.5s; restarts 2 (exit 1); back-off 10.0s", c.String())
}

// trainguard's in-process recovery of a rank 0 SIGKILL: its supervisor
// starts the trainer again in the container, which takes the state of the
// last step from the survivor's memory; the kubelet restarts nothing.
func TestCostOfAnInProcessRecovery(t *testing.T) {
	lines := logOf(t0, 1, 100)
	lines = append(lines,
		sec(100.8).Format(time.RFC3339Nano)+" trainguard supervise: the trainer (pid 57) died of SIGKILL; starting it again (1 of 10, TRAINGUARD_INPROCESS_RESTARTS)",
		sec(104).Format(time.RFC3339Nano)+" 2026-11-26 21:01:44,000 trainguard: rank 0: the state of step 100 from rank 1's memory (23600 bytes), no checkpoint read",
		sec(104.1).Format(time.RFC3339Nano)+" rank 0: resumed from peer:rank1 at step 100, metrics {'step': 100, 'loss': 0.01}")
	lines = append(lines, logOf(sec(105), 101, 150)...)
	pods := poll(containerAt("a", sec(-30), 0, sec(-28), "", time.Time{}, 0), 0, 180)
	tl := NewTimeline(lines, pods)
	require.Equal(t, []time.Time{sec(100.8)}, tl.Supervisor)
	// An exception's restart is the same replacement.
	lines[len(logOf(t0, 1, 100))] = sec(100.8).Format(time.RFC3339Nano) +
		" trainguard supervise: the trainer (pid 57) exited 1 (an uncaught exception); starting it again (1 of 10, TRAINGUARD_INPROCESS_RESTARTS)"
	require.Equal(t, []time.Time{sec(100.8)}, NewTimeline(lines, pods).Supervisor)
	// So is a survivor's restart to rejoin its group.
	lines[len(logOf(t0, 1, 100))] = sec(100.8).Format(time.RFC3339Nano) +
		" trainguard supervise: the trainer (pid 57) exited 75 to rejoin its group at a new generation; starting it again (1 of 10, TRAINGUARD_INPROCESS_RESTARTS)"
	require.Equal(t, []time.Time{sec(100.8)}, NewTimeline(lines, pods).Supervisor)

	c := CostOf(tl, time.Second, sec(100.5), sec(180))
	assert.Equal(t, "0.3s + 4.2s + 0.0s = 4.5s", c.String())
	assert.Zero(t, c.Restarts)
	assert.Empty(t, Corruption("trainguard", tl.Series, map[int]string{}, time.Minute),
		"the survivor kept its process: only the restarted rank resumes")
}

// A node crash: the replacement is a new pod (trainguard deleted the lost
// one); an arm whose pod stays bound to the dead node has none.
func TestCostOfANewPodAndOfNoReplacement(t *testing.T) {
	lines := logOf(t0, 1, 100)
	old := poll(containerAt("a", sec(-30), 0, sec(-28), "", time.Time{}, 0), 0, 180)
	replaced := append(slices.Clone(old), poll(containerAt("b", sec(140), 0, sec(143), "", time.Time{}, 0), 141, 180)...)
	moved := append(append([]string{}, lines...), sec(150).Format(time.RFC3339Nano)+" rank 0: resumed from /checkpoint/ckpt-000000100.pt at step 100, metrics {'step': 100, 'loss': 0.01}")
	moved = append(moved, logOf(sec(152), 101, 120)...)
	c := CostOf(NewTimeline(moved, replaced), time.Second, sec(100), sec(180))
	assert.Equal(t, "40.0s + 12.0s + 0.0s = 52.0s", c.String())

	c = CostOf(NewTimeline(lines, old), time.Second, sec(100), sec(180))
	assert.False(t, c.Replaced)
	assert.False(t, c.Kept)
	assert.Equal(t, "no replacement", c.String())

	kept := CostOf(NewTimeline(lines, old), time.Second, sec(10), sec(50))
	assert.True(t, kept.Kept)
	assert.Equal(t, "kept training", kept.String())
}

// The floors come from the run's start: the later pod of the job created
// (20 s) and the later container started (15 s) before rank 0's first
// step, the fastest arm's.
func TestFloorsAreTheFastestArmsFreshStart(t *testing.T) {
	arm := func(shift float64) Timeline {
		return NewTimeline(logOf(sec(shift), 1, 10), []PodSample{
			SampleOf(containerAt("m", sec(shift-22), 0, sec(shift-18), "", time.Time{}, 0), "pytorch", sec(shift)),
			SampleOf(containerAt("w", sec(shift-20), 0, sec(shift-15), "", time.Time{}, 0), "pytorch", sec(shift)),
		})
	}
	slow := arm(0)
	slow.Series = NewSeries(logOf(sec(5), 1, 10)) // its first step 5 s later
	f := FloorsOf(slow, arm(0))
	assert.Equal(t, Floors{Pod: 20 * time.Second, Process: 15 * time.Second}, f)
	assert.Equal(t, 15*time.Second, f.For(RankRaise, time.Minute))
	assert.Equal(t, 20*time.Second, f.For(Crash, time.Minute))
	assert.Equal(t, 80*time.Second, f.For(KueuePreempt, time.Minute))
}

func TestTableShowsTheCostsBesideTheFloors(t *testing.T) {
	res := &Result{Start: t0, End: sec(180), Floors: Floors{Pod: 20 * time.Second, Process: 15 * time.Second}, Hold: time.Minute,
		Events: []Applied{{Event: Event{Kind: RankKill}, T: sec(100)}}}
	for i, name := range []string{"trainguard", "plain"} {
		res.Arms = append(res.Arms, ArmResult{Arm: Arm{Name: name}, StepTime: time.Second, Impacts: []Impact{{}},
			Costs: []Cost{{Replaced: true, Trained: true, Detection: time.Second, Restart: time.Duration(4+20*i) * time.Second}}})
	}
	table := res.Table()
	assert.Contains(t, table, "| 1 | rank-kill | 15.0s | 1.0s + 4.0s + 0.0s = 5.0s | 1.0s + 24.0s + 0.0s = 25.0s |")
	assert.Contains(t, table, "| rank-kill | 1 | 15.0s | 5.0s | 25.0s |")
	t.Log(table)
}
