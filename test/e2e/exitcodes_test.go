//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// exitCodes: with the operator's ExitCode restart policy, as users write it,
// a worker that exits 137 (a process fault) is restarted in place by the
// kubelet (trainguard's container restart rule); one that exits 1 is not
// retried and an Event says why.
func (e *env) exitCodes(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-exit", true)
	master := replica{1, "ExitCode", sleepScript}
	for _, j := range []string{"exit137", "exit1"} {
		code := 137
		if j == "exit1" {
			code = 1
		}
		if err := e.createJob(ctx, pytorchJob(ns, j, master, replica{1, "ExitCode", exitOnceScript(j, code)}, false)); err != nil {
			t.Fatalf("create %s: %v", j, err)
		}
	}
	retried, err := e.restartedInPlace(ctx, ns, "exit137-worker-0")
	if err != nil {
		t.Fatal(err)
	}
	why, err := e.notRetried(ctx, ns, "exit1-worker-0")
	if err != nil {
		t.Fatal(err)
	}
	e.record("exit codes", true, "137: %s; 1: not retried, Event %q", retried, why)
}

// restartedInPlace: the pod's trainer exits 137 (a process fault under
// ExitCode, whose pods run with restartPolicy Never); trainguard's container
// restart rule makes the kubelet restart it where it is: the same pod (one
// incarnation scheduled), the same node, running again, its previous run's
// exit 137, and no bad node recorded.
func (e *env) restartedInPlace(ctx context.Context, ns, name string) (string, error) {
	start := time.Now()
	var msg string
	err := poll(ctx, time.Second, 3*time.Minute, func() (bool, error) {
		cur, err := e.pod(ctx, ns, name)
		if err != nil || cur == nil || !running(cur) {
			return false, err
		}
		code, restarts := lastExit(cur, "pytorch")
		if code != 137 || restarts < 1 {
			return false, nil
		}
		nodes, err := e.scheduledNodes(ctx, ns, name)
		if err != nil {
			return false, err
		}
		if len(nodes) != 1 {
			return false, stop(fmt.Errorf("exit 137 was retried as a new pod, not in place: incarnations %v", nodes))
		}
		msg = fmt.Sprintf("restarted in place on %s (same pod, restart %d), running again %s after creation", cur.Spec.NodeName, restarts, time.Since(start).Round(time.Second))
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: exit 137 not restarted in place: %w", name, err)
	}
	if err := e.noBadNode(ctx, ns); err != nil {
		return "", err
	}
	return msg + ", no bad node recorded", nil
}

// scheduledNodes maps each incarnation (UID) of the named pod to its node.
func (e *env) scheduledNodes(ctx context.Context, ns, name string) (map[types.UID]string, error) {
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[types.UID]string{}
	for _, ev := range evs.Items {
		if ev.Reason == "Scheduled" && ev.InvolvedObject.Name == name {
			if i := strings.LastIndex(ev.Message, " to "); i >= 0 {
				out[ev.InvolvedObject.UID] = strings.TrimSpace(ev.Message[i+4:])
			}
		}
	}
	return out, nil
}

// notRetried: the pod fails with exit code 1, stays the same pod, and an
// Event about it or its job gives the reason.
func (e *env) notRetried(ctx context.Context, ns, name string) (string, error) {
	p, err := e.waitPod(ctx, ns, name, 3*time.Minute, func(p *corev1.Pod) bool { return exitCode(p) == 1 })
	if err != nil {
		return "", fmt.Errorf("worker never exited 1: %w", err)
	}
	var why string
	err = poll(ctx, 2*time.Second, 90*time.Second, func() (bool, error) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			about := ev.InvolvedObject.UID == p.UID || ev.InvolvedObject.Name == strings.TrimSuffix(name, "-worker-0")
			if about && ev.Reason == "PermanentFailure" {
				why = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("no PermanentFailure Event for %s: %w", name, err)
	}
	time.Sleep(10 * time.Second) // a retry would have replaced the pod by now
	now, err := e.pod(ctx, ns, name)
	if err != nil {
		return "", err
	}
	if now != nil && now.UID != p.UID {
		return "", fmt.Errorf("exit 1 was retried: pod %s replaced (uid %s → %s)", name, p.UID, now.UID)
	}
	return why, nil
}

func exitCode(p *corev1.Pod) int32 {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "pytorch" && s.State.Terminated != nil {
			return s.State.Terminated.ExitCode
		}
		if s.Name == "pytorch" && s.LastTerminationState.Terminated != nil {
			return s.LastTerminationState.Terminated.ExitCode
		}
	}
	return -1
}
