package webhook

import (
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// mirrorNamespaceLabel copies the opt-in annotation into the label the
// webhook namespaceSelectors match, the moment the annotation is set.
func (s *Server) mirrorNamespaceLabel(_ *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return allowed(nil)
	}
	var ns corev1.Namespace
	if err := jobs.Decode(req.Object.Raw, &ns); err != nil {
		return errored(http.StatusBadRequest, fmt.Errorf("decoding Namespace: %w", err))
	}
	base := ns.DeepCopy()
	if !contract.MirrorInjectLabel(&ns.ObjectMeta) {
		return allowed(nil)
	}
	ops, err := admissionio.TypedDiff(&s.injector.types, req.Object.Raw, base, &ns)
	if err != nil {
		return errored(http.StatusInternalServerError, err)
	}
	patch, err := admissionio.EncodePatch(ops)
	if err != nil {
		return errored(http.StatusInternalServerError, err)
	}
	pt := admissionv1.PatchTypeJSONPatch
	s.log.V(1).Info("mirrored opt-in label", "namespace", ns.Name, "label", contract.LabelInjectEnabled, "value", ns.Labels[contract.LabelInjectEnabled])
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}
