package webhook

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
)

// MaxRequestBytes bounds an AdmissionReview: two objects of at most 3 MiB
// each plus the envelope, as the API server itself allows.
const MaxRequestBytes = 7 * 1024 * 1024

// admitFunc answers one admission request; it never sees malformed input.
type admitFunc func(r *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// reviewHandler is the HTTP side of an admission endpoint. It answers
// transport-level problems (wrong method, content type, size, malformed
// JSON) with a real HTTP error status and a message, and everything else
// with an AdmissionReview.
type reviewHandler struct {
	name  string
	admit admitFunc
	log   logr.Logger
}

func (h *reviewHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	review, status, err := decodeReview(r)
	if err != nil {
		h.log.Error(err, "refusing admission request", "webhook", h.name, "status", status, "remote", r.RemoteAddr)
		http.Error(w, err.Error(), status)
		return
	}
	resp := h.safeAdmit(r, review.Request)
	resp.UID = review.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	if err := admissionio.JSON().NewEncoder(w).Encode(&out); err != nil {
		h.log.Error(err, "writing admission response", "webhook", h.name)
	}
}

// safeAdmit turns a panic in a handler into an explained error response:
// the webhook must never crash, and never block a request silently.
func (h *reviewHandler) safeAdmit(r *http.Request, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("internal error in trainguard webhook %s: %v", h.name, p)
			h.log.Error(err, "recovered from panic", "uid", req.UID, "kind", req.Kind, "namespace", req.Namespace, "name", req.Name)
			resp = errored(http.StatusInternalServerError, err)
		}
	}()
	return h.admit(r, req)
}

// decodeReview reads and checks an AdmissionReview, returning the HTTP
// status to answer with on failure.
func decodeReview(r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed; admission requests are POSTed", r.Method)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %q not supported; expected application/json", r.Header.Get("Content-Type"))
	}
	if r.ContentLength > MaxRequestBytes {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body of %d bytes exceeds the %d byte limit", r.ContentLength, MaxRequestBytes)
	}
	body, err := readBody(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds the %d byte limit", MaxRequestBytes)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading request body: %w", err)
	}
	review, err := admissionio.DecodeReview(body)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	return review, 0, nil
}

// readBody reads the body in one allocation of its declared length (the API
// server always declares it): io.ReadAll's doubling would leave about as
// much garbage again as a 6 MiB review is long, at the moment heap is
// scarcest. Without a length, it reads up to the limit.
func readBody(r *http.Request) ([]byte, error) {
	limited := http.MaxBytesReader(nil, r.Body, MaxRequestBytes)
	if r.ContentLength <= 0 {
		return io.ReadAll(limited)
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(limited, body); err != nil {
		return nil, err
	}
	return body, nil
}

func allowed(warnings []string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

func errored(code int32, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Message: err.Error(), Reason: metav1.StatusReasonBadRequest,
	}}
}
