package webhook

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/promreg"
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
type durableReporter struct {
	events  events.EventRecorder
	objects *prometheus.CounterVec
	fold    *eventFold
}

func newDurableReporter(reg prometheus.Registerer, rec events.EventRecorder) (*durableReporter, error) {
	objects := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainguard_ephemeral_checkpoint_objects_total",
		Help: "Training jobs and pods admitted (decision=warned) or refused (decision=refused) because their checkpoints would be deleted with the pod, by the object's namespace (scraped through the ServiceMonitor it reads exported_namespace, as trainguard_checkpoint_total) and kind.",
	}, []string{"namespace", "kind", "decision"})
	objects, err := promreg.Register(reg, objects)
	if err != nil {
		return nil, fmt.Errorf("registering the ephemeral checkpoint metric: %w", err)
	}
	return &durableReporter{events: rec, objects: objects, fold: newEventFold(ephemeralEventInterval)}, nil
}

// report records one admission: only a CREATE that is not a dry run, so
// an update or a `kubectl apply --dry-run=server` leaves no trace.
func (d *durableReporter) report(req *admissionv1.AdmissionRequest, res validators.Result) {
	warned, refused := res.EphemeralCounts()
	if d == nil || warned+refused == 0 || req.Operation != admissionv1.Create || (req.DryRun != nil && *req.DryRun) {
		return
	}
	decision, reason, action, eventType := "warned", ReasonEphemeralCheckpoints, "Admitted", corev1.EventTypeWarning
	if refused > 0 {
		decision, reason, action = "refused", ReasonEphemeralCheckpointsRefused, "Refused"
	}
	d.objects.WithLabelValues(req.Namespace, req.Kind.Kind, decision).Inc()
	if d.events == nil {
		return
	}
	emit, objects := d.fold.admit(req.Namespace, reason)
	if !emit {
		return
	}
	regarding := &corev1.ObjectReference{APIVersion: apiVersion(req), Kind: req.Kind.Kind, Namespace: req.Namespace, Name: req.Name}
	if req.Name == "" { // generateName: the object has no name yet, its namespace does
		regarding = &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: req.Namespace}
	}
	d.events.Eventf(regarding, nil, eventType, reason, action,
		"%s %s: %d pod template(s) checkpoint to storage that is deleted with the pod; set %s on the namespace to a ReadWriteMany PersistentVolumeClaim (%d such object(s) in namespace %s since the last such Event, this one included: one Event per namespace every %s)",
		req.Kind.Kind, displayName(req), warned+refused, contract.AnnotationCheckpointClaim, objects, req.Namespace, d.fold.interval)
}

func apiVersion(req *admissionv1.AdmissionRequest) string {
	if req.Kind.Group == "" {
		return req.Kind.Version
	}
	return req.Kind.Group + "/" + req.Kind.Version
}

func displayName(req *admissionv1.AdmissionRequest) string {
	if req.Name == "" {
		return "(generated name) in namespace " + req.Namespace
	}
	return req.Namespace + "/" + req.Name
}
