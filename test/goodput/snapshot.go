package goodput

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// snapshot logs, per arm, what its job's pods and namespace look like: every
// pod's node, phase and container state, and the namespace's latest
// Events. Taken at the end of the run before any node is repaired, it says
// why an arm "did not train again" (a pod Pending and why, a container
// waiting, an eviction that did not happen) without keeping the cluster.
func (r *Runner) snapshot(ctx context.Context) {
	for _, a := range r.cfg.Arms {
		var b strings.Builder
		fmt.Fprintf(&b, "goodput: state of arm %s (namespace %s) at the end:", a.Name, a.Namespace)
		pods, err := r.cs.CoreV1().Pods(a.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(&b, "\n  pods: %v", err)
		} else {
			for i := range pods.Items {
				fmt.Fprintf(&b, "\n  pod %s", podState(&pods.Items[i]))
			}
		}
		evs, err := r.cs.CoreV1().Events(a.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(&b, "\n  events: %v", err)
		} else {
			items := evs.Items
			sort.Slice(items, func(i, j int) bool { return eventTime(&items[i]).Before(eventTime(&items[j])) })
			if len(items) > 25 {
				items = items[len(items)-25:]
			}
			for _, e := range items {
				fmt.Fprintf(&b, "\n  event %s %s %s/%s %s: %s (x%d)", eventTime(&e).UTC().Format("15:04:05"), e.Type,
					e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, firstLine(e.Message), max(e.Count, 1))
			}
		}
		if a.Trainguard {
			r.trainguardLines(ctx, &b, a.Namespace)
		}
		r.cfg.Logf("%s", b.String())
	}
}

// trainguardLines quotes the last 20 lines of trainguard's logs (every
// replica) that name namespace.
func (r *Runner) trainguardLines(ctx context.Context, b *strings.Builder, namespace string) {
	ns := r.cfg.TrainguardNamespace
	pods, err := r.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=trainguard"})
	if err != nil {
		fmt.Fprintf(b, "\n  trainguard's logs: %v", err)
		return
	}
	var lines []string
	for _, p := range pods.Items {
		tail := int64(5000)
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		raw, err := r.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(c)
		cancel()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, namespace) {
				lines = append(lines, p.Name+": "+l)
			}
		}
	}
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	for _, l := range lines {
		fmt.Fprintf(b, "\n  %s", l)
	}
}

// podState is one line: name, node, phase, deletion, conditions not True,
// each container's state.
func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("%s node=%s phase=%s", p.Name, p.Spec.NodeName, p.Status.Phase)
	if p.DeletionTimestamp != nil {
		s += " deleting-since=" + p.DeletionTimestamp.UTC().Format("15:04:05")
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			s += fmt.Sprintf(" %s=%s(%s)", c.Type, c.Status, c.Reason)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		s += fmt.Sprintf(" [%s restarts=%d", c.Name, c.RestartCount)
		switch st := c.State; {
		case st.Running != nil:
			s += " running since " + st.Running.StartedAt.UTC().Format("15:04:05")
		case st.Waiting != nil:
			s += " waiting " + st.Waiting.Reason
		case st.Terminated != nil:
			s += fmt.Sprintf(" exited %d %s", st.Terminated.ExitCode, st.Terminated.Reason)
		}
		if t := c.LastTerminationState.Terminated; t != nil {
			s += fmt.Sprintf(", last exit %d at %s", t.ExitCode, t.FinishedAt.UTC().Format("15:04:05"))
		}
		s += "]"
	}
	return s
}

func eventTime(e *corev1.Event) time.Time {
	for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}
