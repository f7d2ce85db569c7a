//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// setupLanes gives every lane its own training nodes (labelled laneLabel) and
// checks the API server puts a namespace's node selector on its pods.
func (e *env) setupLanes(ctx context.Context) error {
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if n.Labels[infraLabel] != "true" {
			e.training = append(e.training, n.Name)
		}
	}
	idx := func(n string) int { i, _ := strconv.Atoi(strings.TrimPrefix(n, "tg-node-")); return i }
	sort.Slice(e.training, func(i, j int) bool { return idx(e.training[i]) < idx(e.training[j]) })
	need := 0
	for _, l := range lanes {
		need += l.nodes
	}
	if len(e.training) < need {
		return fmt.Errorf("the scenario lanes need %d training nodes, the cluster has %d (%v): start it with NODES=%d or more (make cluster's default)",
			need, len(e.training), e.training, need+1)
	}
	e.laneNodes, e.scenarioLane = map[string][]string{}, map[string]string{}
	next := 0
	for _, l := range lanes {
		e.laneNodes[l.name] = e.training[next : next+l.nodes]
		next += l.nodes
		for _, s := range l.scenarios {
			e.scenarioLane[s] = l.name
		}
		for _, n := range e.laneNodes[l.name] {
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, laneLabel, l.name)
			if _, err := e.cs.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("label node %s for lane %s: %w", n, l.name, err)
			}
		}
	}
	// Nodes beyond the lanes' get none: no lane's pod lands there.
	for _, n := range e.training[next:] {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, laneLabel)
		_, _ = e.cs.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
	return e.checkNodeSelector(ctx)
}

// checkNodeSelector: a pod created (dry run) in a namespace with a node
// selector gets it; without the API server's PodNodeSelector plugin the
// lanes would share nodes unnoticed.
func (e *env) checkNodeSelector(ctx context.Context) error {
	const name = "e2e-lanes-check"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{nsNodeSelector: laneLabel + "=check"}}}
	_ = e.cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	_ = poll(ctx, time.Second, time.Minute, func() (bool, error) {
		_, err := e.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		return err == nil, err
	})
	defer e.deleteNamespace(ctx, name)
	p, err := e.cs.CoreV1().Pods(name).Create(ctx, pendingPod(name, "check"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("dry-run pod in %s: %w", name, err)
	}
	if p.Spec.NodeSelector[laneLabel] != "check" {
		return fmt.Errorf("a pod in a namespace annotated %s got node selector %v: the API server needs --enable-admission-plugins=...,PodNodeSelector (hack/cluster/up.sh)", nsNodeSelector, p.Spec.NodeSelector)
	}
	return nil
}

// laneOf is the lane of the scenario t belongs to ("" outside the lanes).
func (e *env) laneOf(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	if len(parts) < 2 {
		return ""
	}
	return e.scenarioLane[parts[1]]
}

// nodesOf is the training nodes t's scenario may use: its lane's, or every
// training node for a scenario that runs alone.
func (e *env) nodesOf(t *testing.T) []string {
	if l := e.laneOf(t); l != "" {
		return e.laneNodes[l]
	}
	return e.training
}

// uncordon undoes what an earlier run may have left cordoned on t's nodes.
func (e *env) uncordon(ctx context.Context, t *testing.T) {
	for _, n := range e.nodesOf(t) {
		_, _ = e.kubectl(ctx, "uncordon", n)
	}
}
