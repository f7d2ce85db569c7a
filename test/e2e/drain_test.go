//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	drainSteps = 100
	drainDelay = 0.3
)

// drain: `kubectl drain` the node of a worker. The kubelet runs trainguard's
// preStop hook, rank 0 saves and acknowledges, the operator recreates the pod,
// the scheduler places it on another node, and the job resumes from exactly
// the acknowledged state (hash-compared) and ends bit-identical to an
// uninterrupted run of the same job in the same cluster: same image, thread
// count and world size.
func (e *env) drain(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-drain", true)
	job, ref := "drain", "drain-ref"
	// The trainer is PID 1, as users write it (pid1Command): the drained pod
	// goes when the trainer exits after its checkpoint, not at SIGKILL.
	train := pytorchJob(ns, job, replica{count: 1, restartPolicy: "OnFailure"}, replica{count: 2, restartPolicy: "OnFailure"}, false)
	withPID1Trainer(train, drainSteps, drainDelay, "")
	if err := e.createJob(ctx, train); err != nil {
		t.Fatalf("create PyTorchJob: %v", err)
	}
	master, worker := job+"-master-0", job+"-worker-0"
	e.uncordon(ctx, t)
	if err := e.waitStep(ctx, ns, master, 15, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	old, err := e.pod(ctx, ns, worker)
	if err != nil || old == nil {
		t.Fatalf("worker pod %s: %v", worker, err)
	}
	if inj := old.Annotations["trainguard.io/injected"]; !strings.Contains(inj, "prestop") {
		t.Fatalf("worker pod not injected with the preStop hook: trainguard.io/injected=%q", inj)
	}
	node, before := old.Spec.NodeName, lastStep(e.logs(ctx, ns, master))
	t.Logf("draining %s (runs %s) at master step %d", node, worker, before)
	tDrain := time.Now()
	drained, repl, err := e.drainNode(ctx, ns, worker, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.waitJob(ctx, ns, job, "Succeeded", 8*time.Minute); err != nil {
		t.Fatal(err)
	}
	// The uninterrupted reference runs after, on the same worker nodes (the
	// infra node does not carry the PyTorch image).
	refTrain := pytorchJob(ns, ref, replica{count: 1, restartPolicy: "OnFailure"}, replica{count: 2, restartPolicy: "OnFailure"}, false)
	withPID1Trainer(refTrain, drainSteps, 0, "")
	if err := e.createJob(ctx, refTrain); err != nil {
		t.Fatalf("create the reference PyTorchJob: %v", err)
	}
	if err := e.waitJob(ctx, ns, ref, "Succeeded", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	claim := e.pvDir(ns)
	figures, err := e.drainFigures(filepath.Join(claim, ns, "pytorchjob.kubeflow.org", job), job, tDrain, 3)
	if err != nil {
		t.Fatal(err)
	}
	final, err := sameFinalState(e.root, filepath.Join(claim, ns, "pytorchjob.kubeflow.org", job, "e2e-dumps", job, "final"),
		filepath.Join(claim, ns, "pytorchjob.kubeflow.org", ref, "e2e-dumps", ref, "final"), 3)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := e.checkpointSavedEvent(ctx, ns, "Pod", job+"-")
	if err != nil {
		t.Fatal(err)
	}
	e.record("drain", true, "worker moved %s → %s; drain took %s; %s; %s; outcome Event: %s", node, repl.Spec.NodeName, drained.Round(time.Second), figures, final, saved)
}

// drainNode drains the node of pod old and waits for its replacement (same
// name, new UID) to run on another node; the node is uncordoned after.
func (e *env) drainNode(ctx context.Context, ns, name string, old *corev1.Pod) (time.Duration, *corev1.Pod, error) {
	node, t0 := old.Spec.NodeName, time.Now()
	if _, err := e.kubectl(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s"); err != nil {
		return 0, nil, fmt.Errorf("drain: %w", err)
	}
	drained := time.Since(t0)
	repl, err := e.waitPod(ctx, ns, name, 5*time.Minute, func(p *corev1.Pod) bool { return p.UID != old.UID && running(p) })
	_, _ = e.kubectl(ctx, "uncordon", node)
	if err != nil {
		return 0, nil, fmt.Errorf("replacement of %s: %w", name, err)
	}
	if repl.Spec.NodeName == node {
		return 0, nil, fmt.Errorf("replacement of %s runs on the drained node %s", name, node)
	}
	return drained, repl, nil
}

// drainFigures checks the job's checkpoint directory after the job: the
// acknowledged checkpoint is the one every rank resumed from (0 steps lost,
// identical state).
func (e *env) drainFigures(jobDir, job string, since time.Time, ranks int) (string, error) {
	latest, _, err := newestJSON(jobDir, "trainguard-latest.json")
	if err != nil {
		return "", err
	}
	dumps := filepath.Join(jobDir, "e2e-dumps", job)
	resumedAt, err := modTime(filepath.Join(dumps, "resumed.rank0"))
	if err != nil {
		return "", fmt.Errorf("rank 0 did not resume: %w", err)
	}
	// A drain can stop several pods of the job. Once the first one goes the
	// job restarts, and the restarted trainer may answer a drained pod's
	// request that is still open; that later acknowledgement is of the new
	// incarnation. What must hold: the job resumed from the newest checkpoint
	// acknowledged before it resumed.
	ack, ackPath, later, err := newestAckBefore(jobDir, resumedAt)
	if err != nil {
		return "", fmt.Errorf("no acknowledgement before the resume, the preStop hook did not run or the trainer did not answer: %w", err)
	}
	if ack["status"] != "ok" {
		return "", fmt.Errorf("%s: status %v, error %v", ackPath, ack["status"], ack["error"])
	}
	req, _, err := newestJSON(filepath.Dir(ackPath), "request.json")
	if err != nil {
		return "", err
	}
	if float64(since.Unix())-1 > num(ack, "acked_at") {
		return "", fmt.Errorf("newest ack before the resume (%s) predates the drain", ackPath)
	}
	acked := int(num(ack, "step"))
	resumed := -1
	for rank := 0; rank < ranks; rank++ {
		got, err := dumpStep(e.root, fmt.Sprintf("%s/resumed.rank%d", dumps, rank))
		if err != nil {
			return "", fmt.Errorf("rank %d did not resume: %w", rank, err)
		}
		if got < acked {
			return "", fmt.Errorf("rank %d resumed at step %d, the acknowledged checkpoint is step %d: %d steps lost", rank, got, acked, acked-got)
		}
		if resumed >= 0 && got != resumed {
			return "", fmt.Errorf("ranks resumed at different steps (%d and %d)", resumed, got)
		}
		resumed = got
	}
	// A rank that kept training after the ack (only the stopping pod stops)
	// and then lost its stopped peer takes the dying gasp: a later completed
	// step, committed before the resume. The job must resume from exactly
	// one committed checkpoint: the acknowledged one, or that later one.
	name, how := fmt.Sprint(ack["checkpoint"]), "the ack"
	if resumed > acked {
		var err error
		if name, err = e.committedAtStep(jobDir, dumps+"/resumed.rank0", num(ack, "acked_at"), resumedAt); err != nil {
			return "", fmt.Errorf("all ranks resumed at step %d, after the acknowledged step %d, but not from a checkpoint committed in between: %w", resumed, acked, err)
		}
		how = fmt.Sprintf("the survivors' dying gasp %s, %d step(s) after the ack", name, resumed-acked)
	}
	if out, err := hostPython(e.root, "examples/trainer/compare_state.py", "--checkpoint", jobDir, "--name", name, dumps+"/resumed.rank0"); err != nil {
		return "", fmt.Errorf("resumed state differs from %s: %v %s", name, err, out)
	}
	return fmt.Sprintf("acked step %d, resumed at %d on all %d ranks (0 steps lost, state identical to %s; %d later ack(s) by the resumed job); checkpoint %.1f KiB; preStop→ack %.0f ms",
		acked, resumed, ranks, how, later, num(latest, "size")/1024, (num(ack, "acked_at")-num(req, "requested_at"))*1000), nil
}

// committedAtStep names the committed checkpoint (a trainguard-ckpt-N directory with its
// commit.json) made between after (Unix seconds) and before whose state is
// the resumed dump's.
func (e *env) committedAtStep(jobDir, dump string, after float64, before time.Time) (string, error) {
	commits, _ := filepath.Glob(filepath.Join(jobDir, "trainguard-ckpt-*", "commit.json"))
	var tried []string
	for _, c := range commits {
		fi, err := os.Stat(c)
		if err != nil || float64(fi.ModTime().UnixNano())/1e9 < after || fi.ModTime().After(before) {
			continue
		}
		name := filepath.Base(filepath.Dir(c))
		tried = append(tried, name)
		if _, err := hostPython(e.root, "examples/trainer/compare_state.py", "--checkpoint", jobDir, "--name", name, dump); err == nil {
			return name, nil
		}
	}
	return "", fmt.Errorf("no checkpoint committed between the ack and the resume holds the resumed state (candidates %v)", tried)
}

// sameFinalState compares every rank's final state of the drained job with
// the uninterrupted reference run's, bit for bit.
func sameFinalState(root, got, ref string, ranks int) (string, error) {
	for rank := 0; rank < ranks; rank++ {
		if _, err := hostPython(root, "examples/trainer/compare_state.py", fmt.Sprintf("%s.rank%d", ref, rank), fmt.Sprintf("%s.rank%d", got, rank)); err != nil {
			return "", fmt.Errorf("rank %d: final state differs from the uninterrupted in-cluster run: %v", rank, err)
		}
	}
	return fmt.Sprintf("final state of all %d ranks bit-identical to an uninterrupted in-cluster run", ranks), nil
}

// waitStep waits until the pod's trainer logged rank 0's step n.
func (e *env) waitStep(ctx context.Context, ns, pod string, n int, timeout time.Duration) error {
	err := poll(ctx, 2*time.Second, timeout, func() (bool, error) { return lastStep(e.logs(ctx, ns, pod)) >= n, nil })
	if err != nil {
		p, _ := e.pod(ctx, ns, pod)
		return fmt.Errorf("%s/%s never reached step %d: %w (pod %s)", ns, pod, n, err, phase(p))
	}
	return nil
}

// waitJob waits for the job's latest true condition to be want; a Failed job ends the wait.
func (e *env) waitJob(ctx context.Context, ns, name, want string, timeout time.Duration) error {
	var last string
	err := poll(ctx, 2*time.Second, timeout, func() (bool, error) {
		c, err := e.jobCondition(ctx, ns, name)
		last = c
		if c == "Failed" && want != "Failed" {
			return false, stop(fmt.Errorf("job failed"))
		}
		return c == want, err
	})
	if err != nil {
		return fmt.Errorf("PyTorchJob %s/%s not %s: %w (last condition %q)", ns, name, want, err, last)
	}
	return nil
}

// checkpointSavedEvent waits for a CheckpointSaved Event on a pod of the job
// (pods named prefix*): trainguard makes it from a drained pod's termination
// message (the agent's outcome line, carried out of the container by the
// kubelet). It returns the pod and the message, which names the step, the
// size and the duration. A drain may stop several of the job's pods; any of
// them saving is the outcome this checks.
func (e *env) checkpointSavedEvent(ctx context.Context, ns, kind, prefix string) (string, error) {
	var msg string
	err := poll(ctx, 2*time.Second, 90*time.Second, func() (bool, error) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == kind && strings.HasPrefix(ev.InvolvedObject.Name, prefix) && ev.Reason == "CheckpointSaved" {
				msg = ev.InvolvedObject.Name + ": " + ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("no CheckpointSaved Event on a %s %s*: %w", kind, prefix, err)
	}
	return msg, nil
}

// newestAckBefore returns, of the acknowledgements in the job's signal
// directories, the newest one made before t, and how many were made after.
func newestAckBefore(jobDir string, t time.Time) (map[string]any, string, int, error) {
	paths, _ := filepath.Glob(filepath.Join(jobDir, ".trainguard", "*", "ack.json"))
	var best map[string]any
	var bestPath string
	later := 0
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		at := num(m, "acked_at")
		if at > float64(t.UnixNano())/1e9 {
			later++
			continue
		}
		if best == nil || at > num(best, "acked_at") {
			best, bestPath = m, p
		}
	}
	if best == nil {
		return nil, "", later, fmt.Errorf("none of %d acknowledgement(s) under %s precedes the resume at %s", len(paths), jobDir, t.Format(time.RFC3339Nano))
	}
	return best, bestPath, later, nil
}

func modTime(path string) (time.Time, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}
