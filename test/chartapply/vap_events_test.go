package chartapply

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventIn is an Event about a pod in ns, as the rescheduler's recorder
// writes it (events.k8s.io/v1), or in the core API, as leader election does.
func eventIn(ns string, core bool) client.Object {
	name := fmt.Sprintf("worker.%d", time.Now().UnixNano())
	if core {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "worker"},
			Reason:         "NodeLost", Message: "spoofed", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "trainguard-rescheduler"},
		}
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Name: name},
		EventTime:           metav1.NewMicroTime(time.Now()),
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "worker"},
		Reason:              "NodeLost",
		Note:                "spoofed",
		Type:                corev1.EventTypeWarning,
		Action:              "Evict",
		ReportingController: "trainguard-rescheduler",
		ReportingInstance:   "trainguard-rescheduler-0",
	}
}

// trainguard's account may write Events only in the
// namespaces it injects and in its own, in both APIs, in every mode; a
// spoofed warning in kube-system (or any namespace it does not inject) is
// refused.
func TestAdmissionPolicyFencesEvents(t *testing.T) {
	ctx := context.Background()
	ensureNamespace(t, ctx, "kube-system")
	ensureNamespace(t, ctx, "default")
	for _, m := range fenceModes("fenceev") {
		t.Run(m.name, func(t *testing.T) {
			ns, policy := m.release+"-system", m.release+"-trainguard-fence"
			sa := installFence(t, m.release, ns, m.set...)
			injected := namespaceWithPod(t, m.release+"-team", optIn("enabled"))
			optedOut := namespaceWithPod(t, m.release+"-out", optIn("disabled"))
			waitPolicyActive(t, sa, podIn(t, ns), policy)

			for _, core := range []bool{true, false} {
				api := map[bool]string{true: "core/v1", false: "events.k8s.io/v1"}[core]
				for _, where := range []string{injected.Namespace, ns} {
					ev := eventIn(where, core)
					assert.NoError(t, sa.Create(ctx, ev, client.DryRunAll), "%s Event in %s", api, where)
				}
				refused := []string{"kube-system", optedOut.Namespace}
				if !m.clusterWide {
					refused = append(refused, "default") // cluster-wide mode injects default
				}
				for _, where := range refused {
					err := sa.Create(ctx, eventIn(where, core), client.DryRunAll)
					assert.True(t, refusedByPolicy(err, policy), "a %s Event in %s must be refused, got %v", api, where, err)
					if err != nil {
						assert.Contains(t, err.Error(), "may write Events only in namespaces trainguard injects", "%s in %s", api, where)
					}
				}
			}
			// Updates (the recorder patches a repeated Event's series) too.
			stored := eventIn("kube-system", false).(*eventsv1.Event)
			require.NoError(t, apiServer.c.Create(ctx, stored))
			series := fmt.Sprintf(`{"series":{"count":2,"lastObservedTime":%q}}`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))
			err := sa.Patch(ctx, stored, client.RawPatch(types.MergePatchType, []byte(series)), client.DryRunAll)
			assert.True(t, refusedByPolicy(err, policy), "patching an Event in kube-system must be refused, got %v", err)
			if err != nil {
				assert.Contains(t, err.Error(), "may write Events only in namespaces trainguard injects")
			}
		})
	}
}
