package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/client-go/tools/events"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/validators"
)

// Event reasons for training objects whose checkpoints would die with
// their pods (docs/annotations.md#durable-checkpoints).
const (
	ReasonEphemeralCheckpoints        = "EphemeralCheckpoints"
	ReasonEphemeralCheckpointsRefused = "EphemeralCheckpointsRefused"
)

// durableReporter turns the validator's verdict on non-durable checkpoints
// into a metric and an Event on the object, so a platform team sees every
// job that would lose its checkpoints, not only the user who got the
// admission warning. The metric counts every object; the Events are folded
// to one per namespace and interval, which names how many objects it
// stands for.
type durableReporter struct{ foldedReporter }

func newDurableReporter(reg prometheus.Registerer, rec events.EventRecorder) (*durableReporter, error) {
	r, err := newFoldedReporter(reg, rec, prometheus.CounterOpts{
		Name: "trainguard_ephemeral_checkpoint_objects_total",
		Help: "Training jobs and pods admitted (decision=warned) or refused (decision=refused) because their checkpoints would be deleted with the pod, by the object's namespace (scraped through the ServiceMonitor it reads exported_namespace, as trainguard_checkpoint_total) and kind.",
	}, "decision", "ephemeral checkpoint")
	if err != nil {
		return nil, err
	}
	return &durableReporter{r}, nil
}

// report records one admission: only a CREATE that is not a dry run, so
// an update or a `kubectl apply --dry-run=server` leaves no trace.
func (d *durableReporter) report(req *admissionv1.AdmissionRequest, res validators.Result) {
	warned, refused := res.EphemeralCounts()
	if d == nil || warned+refused == 0 || req.Operation != admissionv1.Create || (req.DryRun != nil && *req.DryRun) {
		return
	}
	decision, reason, action := "warned", ReasonEphemeralCheckpoints, "Admitted"
	if refused > 0 {
		decision, reason, action = "refused", ReasonEphemeralCheckpointsRefused, "Refused"
	}
	d.record(req, decision, reason, action,
		"%s %s: %d pod template(s) checkpoint to storage that is deleted with the pod; set %s on the namespace to a ReadWriteMany PersistentVolumeClaim",
		req.Kind.Kind, displayName(req), warned+refused, contract.AnnotationCheckpointClaim)
}
