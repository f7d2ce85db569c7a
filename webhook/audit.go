package webhook

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/promreg"
	"github.com/trainguard/trainguard/internal/jobs"
)

// Event reasons and metric verdicts of audit mode: what trainguard would
// have done to an object it admitted unchanged.
const (
	ReasonAuditWouldInject = "AuditWouldInject"
	ReasonAuditWouldRefuse = "AuditWouldRefuse"
)

// Audit-mode warnings start with this, so a user tells them from
// trainguard's other warnings (and a platform team can grep its logs).
const auditPrefix = "audit mode, nothing changed: "

// auditWouldInject is the warning for a patch audit mode withheld: the
// injections it would have applied, by their marker names.
func auditWouldInject(applied string, ops int) string {
	return fmt.Sprintf("%strainguard would inject %s (%d change(s)); set %s=%s on the namespace to apply them",
		auditPrefix, applied, ops, contract.AnnotationAdmissionMode, contract.ModeEnforce)
}

// auditWouldRefuse is the warning for one error audit mode let through.
func auditWouldRefuse(err string) string {
	return auditPrefix + "trainguard would refuse this object: " + err
}

// auditFailedOpen is the warning for an error audit mode admitted anyway.
func auditFailedOpen(err error) string {
	return auditPrefix + "trainguard could not process this object and admitted it (audit mode fails open): " + err.Error()
}

// wouldInject names what a withheld patch applies: the marker it writes.
func wouldInject(raw []byte, patch []jsonpatch.Operation) string {
	out, err := admissionio.ApplyPatch(raw, patch)
	if err == nil {
		var h jobs.Header
		if jobs.Decode(out, &h) == nil {
			if m := h.Metadata.Annotations[contract.AnnotationInjected]; m != "" {
				return m
			}
		}
	}
	return "its defaults"
}

// auditReporter records what audit mode let through: a metric per object
// and an Event on it, folded per namespace and verdict like the ephemeral
// checkpoint Events (eventfold.go).
type auditReporter struct {
	events  events.EventRecorder
	objects *prometheus.CounterVec
	fold    *eventFold
}

func newAuditReporter(reg prometheus.Registerer, rec events.EventRecorder) (*auditReporter, error) {
	objects := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainguard_audit_objects_total",
		Help: "Objects admitted unchanged in audit mode that trainguard would have injected (verdict=would-inject) or refused (verdict=would-refuse), by namespace and kind.",
	}, []string{"namespace", "kind", "verdict"})
	objects, err := promreg.Register(reg, objects)
	if err != nil {
		return nil, fmt.Errorf("registering the audit metric: %w", err)
	}
	return &auditReporter{events: rec, objects: objects, fold: newEventFold(ephemeralEventInterval)}, nil
}

// report records one object audit mode let through; like the durable
// reporter, only a CREATE or UPDATE that is not a dry run leaves a trace.
func (a *auditReporter) report(req *admissionv1.AdmissionRequest, reason, what string) {
	if a == nil || (req.DryRun != nil && *req.DryRun) {
		return
	}
	verdict := "would-inject"
	if reason == ReasonAuditWouldRefuse {
		verdict = "would-refuse"
	}
	a.objects.WithLabelValues(req.Namespace, req.Kind.Kind, verdict).Inc()
	if a.events == nil {
		return
	}
	emit, objects := a.fold.admit(req.Namespace, reason)
	if !emit {
		return
	}
	regarding := &corev1.ObjectReference{APIVersion: apiVersion(req), Kind: req.Kind.Kind, Namespace: req.Namespace, Name: req.Name}
	if req.Name == "" {
		regarding = &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: req.Namespace}
	}
	action := "WouldInject"
	if reason == ReasonAuditWouldRefuse {
		action = "WouldRefuse"
	}
	a.events.Eventf(regarding, nil, corev1.EventTypeWarning, reason, action,
		"audit mode admitted %s %s unchanged: %s (%d such object(s) in namespace %s since the last such Event, this one included: one Event per namespace every %s)",
		req.Kind.Kind, displayName(req), what, objects, req.Namespace, a.fold.interval)
}

// auditErrored turns an error answer into an admission in audit mode.
func auditErrored(resp *admissionv1.AdmissionResponse, audit bool) *admissionv1.AdmissionResponse {
	if !audit || resp.Allowed || resp.Result == nil {
		return resp
	}
	return allowed(append(resp.Warnings, auditFailedOpen(fmt.Errorf("%s", resp.Result.Message))))
}
