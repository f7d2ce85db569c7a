package webhook

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/client-go/tools/events"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/internal/foundations/contract"
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
type auditReporter struct{ foldedReporter }

func newAuditReporter(reg prometheus.Registerer, rec events.EventRecorder) (*auditReporter, error) {
	r, err := newFoldedReporter(reg, rec, prometheus.CounterOpts{
		Name: "trainguard_audit_objects_total",
		Help: "Objects admitted unchanged in audit mode that trainguard would have injected (verdict=would-inject) or refused (verdict=would-refuse), by namespace and kind.",
	}, "verdict", "audit")
	if err != nil {
		return nil, err
	}
	return &auditReporter{r}, nil
}

// report records one object audit mode let through; like the durable
// reporter, only a CREATE or UPDATE that is not a dry run leaves a trace.
func (a *auditReporter) report(req *admissionv1.AdmissionRequest, reason, what string) {
	if a == nil || (req.DryRun != nil && *req.DryRun) {
		return
	}
	verdict, action := "would-inject", "WouldInject"
	if reason == ReasonAuditWouldRefuse {
		verdict, action = "would-refuse", "WouldRefuse"
	}
	a.record(req, verdict, reason, action, "audit mode admitted %s %s unchanged: %s", req.Kind.Kind, displayName(req), what)
}

// auditErrored turns an error answer into an admission in audit mode.
func auditErrored(resp *admissionv1.AdmissionResponse, audit bool) *admissionv1.AdmissionResponse {
	if !audit || resp.Allowed || resp.Result == nil {
		return resp
	}
	return allowed(append(resp.Warnings, auditFailedOpen(fmt.Errorf("%s", resp.Result.Message))))
}
