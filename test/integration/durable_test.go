package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/test/controlplane"
)

// TestEphemeralCheckpointsThroughTheAPIServer: through a real
// kube-apiserver, a job in a namespace with no checkpoint claim is created
// with an admission warning the client sees, an EphemeralCheckpoints Event
// in its namespace (naming how many objects it stands for: one Event per
// namespace a minute) and a count in trainguard's metrics; a namespace with a
// claim gets none; a namespace requiring durable checkpoints refuses it.
func TestEphemeralCheckpointsThroughTheAPIServer(t *testing.T) {
	ctx := context.Background()
	c, rec := warningClient(t)

	ns := namespace(t, true, nil)
	require.NoError(t, c.Create(ctx, job(t, ns, "ephemeral", masterWorkerSpec)))
	warnings := rec.Take()
	assert.Equal(t, 2, countContaining(warnings, "checkpoints are not durable: /checkpoint is on the container's own filesystem"), "one per template: %q", warnings)
	ev := awaitEvents(t, ns, "EphemeralCheckpoints")[0]
	assert.Equal(t, corev1.EventTypeWarning, ev.Type)
	assert.Equal(t, "PyTorchJob", ev.InvolvedObject.Kind)
	assert.Equal(t, "ephemeral", ev.InvolvedObject.Name)
	assert.Contains(t, ev.Message, "(1 such object(s) in namespace "+ns+" since the last such Event, this one included", "the Event names the objects it stands for")
	t.Logf("Event: %s %s: %s", ev.Reason, ev.InvolvedObject.Name, ev.Message)
	assert.Equal(t, 1.0, ephemeralCount(t, ns, "warned"))

	withClaim := namespace(t, true, map[string]string{contract.AnnotationCheckpointClaim: "team-ckpt"})
	require.NoError(t, c.Create(ctx, job(t, withClaim, "durable", masterWorkerSpec)))
	assert.Zero(t, countContaining(rec.Take(), "not durable"))
	assert.Zero(t, ephemeralCount(t, withClaim, "warned"))

	strict := namespace(t, true, map[string]string{contract.AnnotationRequireDurableCheckpoints: "true"})
	err := c.Create(ctx, job(t, strict, "refused", masterWorkerSpec))
	require.Error(t, err)
	t.Logf("API server said: %s", err)
	assert.Contains(t, err.Error(), "spec.pytorchReplicaSpecs[Master].template.spec.containers[0].volumeMounts: Forbidden: checkpoints are not durable")
	assert.Contains(t, err.Error(), "trainguard.io/require-durable-checkpoints=true")
	assert.Equal(t, 1.0, ephemeralCount(t, strict, "refused"))
}

func countContaining(list []string, s string) int {
	n := 0
	for _, x := range list {
		if strings.Contains(x, s) {
			n++
		}
	}
	return n
}

// warningClient is a client of the API server whose warnings the test
// reads from rec.
func warningClient(t *testing.T) (client.Client, *controlplane.Warnings) {
	t.Helper()
	cfg, rec := controlplane.WithWarnings(env.cp.Config)
	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	return c, rec
}

// awaitEvents waits for an Event of each reason in ns and returns the
// first of each, in the order of reasons.
func awaitEvents(t *testing.T, ns string, reasons ...string) []corev1.Event {
	t.Helper()
	var found []corev1.Event
	require.Eventually(t, func() bool {
		var events corev1.EventList
		require.NoError(t, env.c.List(context.Background(), &events, client.InNamespace(ns)))
		found = found[:0]
		for _, reason := range reasons {
			i := slices.IndexFunc(events.Items, func(e corev1.Event) bool { return e.Reason == reason })
			if i < 0 {
				return false
			}
			found = append(found, events.Items[i])
		}
		return true
	}, 10*time.Second, 100*time.Millisecond, "Events %v in %s", reasons, ns)
	return found
}

// ephemeralCount reads trainguard_ephemeral_checkpoint_objects_total for
// a namespace's PyTorchJobs (trainguard runs in this process).
func ephemeralCount(t *testing.T, ns, decision string) float64 {
	t.Helper()
	return counterSum(t, "trainguard_ephemeral_checkpoint_objects_total", "namespace", ns, "kind", "PyTorchJob", "decision", decision)
}
