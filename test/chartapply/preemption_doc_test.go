package chartapply

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/test/chart"
)

// yamlBlock is a fenced YAML block of a Markdown file.
var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// docObjects decodes the YAML block of docs/<doc> that contains marker.
func docObjects(t *testing.T, doc, marker string) []*unstructured.Unstructured {
	t.Helper()
	root, err := chart.RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "docs", doc))
	require.NoError(t, err)
	for _, m := range yamlBlock.FindAllStringSubmatch(string(raw), -1) {
		if !strings.Contains(m[1], marker) {
			continue
		}
		var out []*unstructured.Unstructured
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(m[1])), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else {
				require.NoError(t, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
		return out
	}
	t.Fatalf("docs/%s has no YAML block with %q", doc, marker)
	return nil
}

// highWorkload is a Workload as Kueue writes it for a job of the given
// priority, whichever class kind it resolved the priority from.
func highWorkload(ns, name, classKind, className string, priority int64) *unstructured.Unstructured {
	group := "kueue.x-k8s.io"
	if classKind == "PriorityClass" {
		group = "scheduling.k8s.io"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{
			"queueName":        "training",
			"priority":         priority,
			"priorityClassRef": map[string]any{"group": group, "kind": classKind, "name": className},
			"podSets": []any{map[string]any{"name": "main", "count": int64(1), "template": map[string]any{
				"spec": map[string]any{"containers": []any{map[string]any{"name": "pytorch", "image": "registry.example/train:1"}}},
			}}},
		},
	}}
}

// TestPreemptionDocPolicyFencesTheWorkloadPriority: the multi-tenant policy
// docs/preemption.md gives platform teams, applied as written. A policy on
// the jobs' priority-class label was bypassed by the pod template's
// priorityClassName (Kueue falls back to it) and by every kind it did not
// list; on the Workload, the resolved priority is refused in a namespace
// not allowed whatever its source, and passes where allowed.
func TestPreemptionDocPolicyFencesTheWorkloadPriority(t *testing.T) {
	ctx := context.Background()
	objs := docObjects(t, "preemption.md", "name: training-high-priority")
	require.Len(t, objs, 2, "the policy and its binding")
	for _, o := range objs {
		require.NoError(t, apiServer.c.Create(ctx, o), "creating %s", describe(o))
		t.Cleanup(func() { _ = apiServer.c.Delete(context.Background(), o) })
	}
	const out, in = "prio-team-b", "prio-team-a"
	ensureNamespace(t, ctx, out)
	require.NoError(t, apiServer.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: in, Labels: map[string]string{"example.com/high-priority": "allowed"}}}))

	dryCreate := func(u *unstructured.Unstructured) error {
		return apiServer.c.Create(ctx, u.DeepCopy(), client.DryRunAll)
	}
	// The policy takes effect once the API server has loaded it.
	require.Eventually(t, func() bool {
		return dryCreate(highWorkload(out, "probe", "WorkloadPriorityClass", "training-high", 1000)) != nil
	}, 30*time.Second, 200*time.Millisecond, "the documented policy never refused a high Workload")

	for what, wl := range map[string]*unstructured.Unstructured{
		"the priority-class label (WorkloadPriorityClass)":  highWorkload(out, "label", "WorkloadPriorityClass", "training-high", 1000),
		"the pod template's priorityClassName (fallback)":   highWorkload(out, "template", "PriorityClass", "team-b-urgent", 1000),
		"a class above training-high of any name or source": highWorkload(out, "above", "PriorityClass", "system-ish", 2000000),
	} {
		err := dryCreate(wl)
		assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "%s in %s must be refused, got %v", what, out, err)
		if err != nil {
			assert.Contains(t, err.Error(), "reserved to namespaces labelled example.com/high-priority=allowed", what)
		}
	}
	assert.NoError(t, dryCreate(highWorkload(out, "low", "WorkloadPriorityClass", "training-low", 100)), "training-low stays open to every team")
	assert.NoError(t, dryCreate(highWorkload(in, "high", "WorkloadPriorityClass", "training-high", 1000)), "an allowed namespace runs at the high priority")
	assert.NoError(t, dryCreate(highWorkload(in, "fallback", "PriorityClass", "team-a-urgent", 1000)), "whatever the priority's source")
}
