package webhook

import (
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/validators"
)

// mutate answers the mutating endpoint for kind. Only CREATE is mutated:
// the pod template is what matters and it is fixed at creation.
func (s *Server) mutate(want schema.GroupVersionKind) admitFunc {
	return func(r *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		log := s.log.WithValues("uid", req.UID, "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "dryRun", req.DryRun != nil && *req.DryRun)
		if req.Operation != admissionv1.Create {
			log.V(1).Info("admitted unchanged", "reason", "operation "+string(req.Operation)+" is not mutated")
			return allowed(nil)
		}
		if gvk := schema.GroupVersionKind(req.Kind); gvk != want {
			log.Info("admitted unchanged: unexpected kind sent to this endpoint; check the webhook configuration's rules", "expected", jobs.String(want))
			return allowed(nil)
		}
		res, err := s.injector.Inject(r.Context(), Request{GVK: want, Namespace: req.Namespace, Raw: req.Object.Raw})
		// Before the namespace is read, only the configuration says audit.
		audit := res.Audit || s.scope.Config.AdmissionMode == contract.ModeAudit
		if err != nil {
			log.Error(err, "refused: cannot mutate", "audit", audit)
			return auditErrored(errored(http.StatusBadRequest, fmt.Errorf("trainguard could not process this %s: %w", req.Kind.Kind, err)), audit)
		}
		if res.Skipped != "" {
			log.V(1).Info("admitted unchanged", "reason", res.Skipped)
			return allowed(append(res.Warnings, Unchanged(res.Skipped)))
		}
		if res.Audit {
			if len(res.Patch) == 0 {
				return allowed(res.Warnings)
			}
			what := wouldInject(req.Object.Raw, res.Patch)
			s.audit.report(req, ReasonAuditWouldInject, "trainguard would inject "+what)
			log.V(1).Info("admitted unchanged: audit mode", "wouldInject", what, "patchOperations", len(res.Patch))
			return allowed(append(res.Warnings, auditWouldInject(what, len(res.Patch))))
		}
		resp := allowed(res.Warnings)
		if len(res.Patch) > 0 {
			patch, err := admissionio.EncodePatch(res.Patch)
			if err != nil {
				log.Error(err, "refused: cannot encode patch")
				return errored(http.StatusInternalServerError, err)
			}
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
		log.V(1).Info("admitted", "patchOperations", len(res.Patch), "warnings", len(res.Warnings))
		return resp
	}
}

// validate answers the validating endpoint for want. Objects are
// validated exactly where they would be mutated: the same Scope decides.
func (s *Server) validate(want schema.GroupVersionKind) admitFunc {
	return func(r *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		log := s.log.WithValues("uid", req.UID, "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "operation", req.Operation)
		if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
			return allowed(nil)
		}
		gvk := schema.GroupVersionKind(req.Kind)
		if gvk != want {
			log.Info("admitted unvalidated: unexpected kind sent to this endpoint; check the webhook configuration's rules", "expected", jobs.String(want))
			return allowed(nil)
		}
		var nsAnn map[string]string
		audit := s.scope.Config.AdmissionMode == contract.ModeAudit
		// A cluster-scoped kind (ClusterTrainingRuntime) has no namespace to opt in.
		if gvk != namespaceGVK() && !s.injector.kinds().IsClusterScoped(gvk) {
			ann, skip, err := s.scope.Namespace(r.Context(), req.Namespace)
			if err != nil {
				log.Error(err, "refused: cannot read namespace")
				return auditErrored(errored(http.StatusInternalServerError, fmt.Errorf("trainguard could not read namespace %q: %w", req.Namespace, err)), audit)
			}
			if skip != "" {
				log.V(1).Info("admitted unvalidated", "reason", skip)
				return allowed(nil)
			}
			nsAnn = ann
			audit = contract.Audited(s.scope.Config.AdmissionMode, nsAnn)
		}
		res, err := s.validator.Validate(validators.Object{GVK: gvk, Raw: req.Object.Raw, OldRaw: req.OldObject.Raw, SubResource: req.SubResource, NamespaceAnnotations: nsAnn})
		if err != nil {
			log.Error(err, "refused: cannot decode")
			return auditErrored(errored(http.StatusBadRequest, fmt.Errorf("trainguard could not decode this %s: %w", req.Kind.Kind, err)), audit)
		}
		if audit && len(res.Errors) > 0 {
			warnings := res.Warnings
			for _, e := range res.Errors {
				warnings = append(warnings, auditWouldRefuse(e.Error()))
			}
			s.audit.report(req, ReasonAuditWouldRefuse, "trainguard would refuse it: "+res.Errors.ToAggregate().Error())
			log.V(1).Info("admitted: audit mode", "wouldRefuse", res.Errors.ToAggregate().Error())
			return allowed(warnings)
		}
		s.durable.report(req, res)
		if len(res.Errors) > 0 {
			status := apierrors.NewInvalid(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, req.Name, res.Errors)
			log.V(1).Info("refused", "errors", res.Errors.ToAggregate().Error())
			return &admissionv1.AdmissionResponse{Allowed: false, Result: &status.ErrStatus, Warnings: res.Warnings}
		}
		log.V(1).Info("admitted", "warnings", len(res.Warnings))
		return allowed(res.Warnings)
	}
}
