//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/test/goodput"
)

// warnedStep reads the step of the node-warning controller's Event.
var warnedStep = regexp.MustCompile(`: step (\d+) committed`)

// nodeWarning: a node announces its maintenance (MaintenancePlanned=True,
// written through the status subresource as a node agent would) while a
// 2-rank job with a periodic checkpoint every 100 steps trains with rank 0
// on it. trainguard asks the job for a checkpoint now: committed within
// 5 s, the job trains on (same pods, no restart). Then the node dies as in
// node crash: the job resumes at the warned step or later, and the steps
// lost are those since the warning's checkpoint instead of those since the
// last periodic one (the same job's, one interval: printed side by side).
func (e *env) nodeWarning(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-warning", true)
	const job, saveEvery = "warned", 100
	script := trainScript(job, 4000, 0.3, saveEvery)
	if err := e.createJob(ctx, pytorchJob(ns, job, replica{1, "OnFailure", script}, replica{1, "OnFailure", script}, false)); err != nil {
		t.Fatalf("create PyTorchJob: %v", err)
	}
	defer func() { _ = e.dyn.Resource(pytorchJobs).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{}) }()
	master := job + "-master-0"
	// Past the first periodic checkpoint, so the warning saves steps.
	if err := e.waitStep(ctx, ns, master, saveEvery+30, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	before, err := e.pod(ctx, ns, master)
	if err != nil || before == nil {
		t.Fatalf("master pod: %v", err)
	}
	node := before.Spec.NodeName
	restarts := restartsOf(before)

	tWarn := time.Now()
	if err := e.setNodeCondition(ctx, node, "MaintenancePlanned", corev1.ConditionTrue); err != nil {
		t.Fatalf("set MaintenancePlanned on %s: %v", node, err)
	}
	defer func() {
		if err := e.setNodeCondition(context.Background(), node, "MaintenancePlanned", corev1.ConditionFalse); err != nil {
			t.Errorf("clear MaintenancePlanned on %s: %v", node, err)
		}
	}()
	note, err := e.jobEvent(ctx, ns, "PyTorchJob", job, "CheckpointOnWarning", 5*time.Second)
	if err != nil {
		t.Fatalf("no checkpoint committed within 5 s of the warning: %v", err)
	}
	toCommit := time.Since(tWarn)
	m := warnedStep.FindStringSubmatch(note)
	if m == nil {
		t.Fatalf("the Event names no committed step: %s", note)
	}
	warned, _ := strconv.Atoi(m[1])
	if !strings.Contains(note, "MaintenancePlanned=True") || !strings.Contains(note, node) {
		t.Errorf("the Event does not name the node and the condition: %s", note)
	}
	// Training goes on: further steps in the same container.
	if err := e.waitStep(ctx, ns, master, warned+10, time.Minute); err != nil {
		t.Fatalf("training did not go on after the warning's checkpoint: %v", err)
	}
	after, err := e.pod(ctx, ns, master)
	if err != nil || after == nil || after.UID != before.UID || restartsOf(after) != restarts {
		t.Fatalf("the warning restarted or replaced the master (before %s/%d restarts, after %v): nothing may stop", before.UID, restarts, podSummary(after))
	}

	idx := strings.TrimPrefix(node, "tg-node-")
	killStep := lastStep(e.logs(ctx, ns, master))
	t.Logf("%s: killing node %s at master step %d (warned checkpoint at step %d)", job, node, killStep, warned)
	tKill := time.Now()
	defer e.restartNode(ctx, t, idx)
	if _, err := e.run(ctx, "bash", "hack/cluster/node-ctl.sh", "kill", idx); err != nil {
		t.Fatal(err)
	}
	var resumed int
	var recovered time.Time
	err = poll(ctx, 2*time.Second, plainCap, func() (bool, error) {
		p, err := e.pod(ctx, ns, master)
		if err != nil || p == nil || !startedAfter(p, tKill, "pytorch") {
			return false, err
		}
		ts, step, ok := firstStepAfter(e.logs(ctx, ns, master), tKill)
		recovered, resumed = ts, step-1
		return ok, nil
	})
	if err != nil {
		t.Fatalf("no recovery within %s: %s", plainCap, e.blocker(ctx, ns, job, node))
	}
	if resumed < warned {
		t.Errorf("resumed at step %d, before the warning's checkpoint of step %d", resumed, warned)
	}
	periodic := killStep / saveEvery * saveEvery
	e.record("node warning", true, "checkpoint committed %s after MaintenancePlanned=True (step %d), training on; node killed at step %d, "+
		"resumed at step %d %s later: %d steps lost warned, %d unwarned (periodic checkpoint of step %d, every %d)",
		toCommit.Round(100*time.Millisecond), warned, killStep, resumed, recovered.Sub(tKill).Round(time.Second),
		max(killStep-resumed, 0), killStep-periodic, periodic, saveEvery)
}

// setNodeCondition writes one condition of the node's status as a node
// agent does (goodput.SetNodeCondition).
func (e *env) setNodeCondition(ctx context.Context, node, typ string, status corev1.ConditionStatus) error {
	return goodput.SetNodeCondition(ctx, e.cs, node, typ, status)
}

// jobEvent waits for an Event with the reason on the job and returns its message.
func (e *env) jobEvent(ctx context.Context, ns, kind, name, reason string, timeout time.Duration) (string, error) {
	var msg string
	err := poll(ctx, 250*time.Millisecond, timeout, func() (bool, error) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Reason == reason {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg, err
}

func restartsOf(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

func podSummary(p *corev1.Pod) string {
	if p == nil {
		return "gone"
	}
	return fmt.Sprintf("%s/%d restarts", p.UID, restartsOf(p))
}
