package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/webhook"
)

// PatchingNoop is the benchmarks' "patching no-op" (make load, make
// scale): a webhook that does no work and answers each mutating path with
// the patch trainguard's own handler (in this process, the default
// configuration, a namespace annotated as given) computed for the first
// object it was asked about there. The API server then does all the work
// trainguard's mutation causes while the webhook does none.
type PatchingNoop struct {
	tg      map[string]http.Handler
	mu      sync.Mutex
	patches map[string][]byte
}

// NewPatchingNoop serves trainguard's handlers for a namespace with the
// annotations ann.
func NewPatchingNoop(ann map[string]string) *PatchingNoop {
	optedIn := func(context.Context, string) (map[string]string, bool, error) { return ann, true, nil }
	s := webhook.NewServer(webhook.Options{Config: configv1alpha1.Default(), OwnNamespace: Namespace}, optedIn, nil, logr.Discard())
	return &PatchingNoop{tg: s.Handlers(), patches: map[string][]byte{}}
}

// Answer allows the object with trainguard's patch for path (none where
// trainguard makes none); an error is a 500.
func (p *PatchingNoop) Answer(path string, req admission.Request) admission.Response {
	patch, err := p.patch(path, req)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if len(patch) == 0 {
		return admission.Allowed("") // a patchType without a patch is an invalid answer
	}
	pt := admissionv1.PatchTypeJSONPatch
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}}
}

func (p *PatchingNoop) patch(path string, req admission.Request) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if patch, ok := p.patches[path]; ok {
		return patch, nil
	}
	h, ok := p.tg[path]
	if !ok {
		return nil, fmt.Errorf("trainguard serves no %s", path)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &req.AdmissionRequest,
	})
	if err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, r)
	out, err := admissionio.DecodeReviewResponse(rec.Body.Bytes())
	if err != nil {
		return nil, err
	}
	if out.Response == nil {
		return nil, fmt.Errorf("trainguard's handler gave no response for %s %s/%s", path, req.Namespace, req.Name)
	}
	p.patches[path] = out.Response.Patch
	return out.Response.Patch, nil
}

// Operations is the number of operations of the patch answered for path;
// an error where nothing was asked there yet.
func (p *PatchingNoop) Operations(path string) (int, error) {
	p.mu.Lock()
	patch, ok := p.patches[path]
	p.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("the patching no-op was asked nothing on %s", path)
	}
	if len(patch) == 0 {
		return 0, nil
	}
	var ops []json.RawMessage
	if err := json.Unmarshal(patch, &ops); err != nil {
		return 0, fmt.Errorf("trainguard's patch for %s: %w", path, err)
	}
	return len(ops), nil
}
