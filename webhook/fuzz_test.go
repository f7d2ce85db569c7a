package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// FuzzAdmissionReview throws arbitrary bodies at every endpoint: the
// handler must answer (an HTTP error or a review) and never panic.
func FuzzAdmissionReview(f *testing.F) {
	f.Add(review(f, admissionv1.Create, podGVK(), "team-a", pod("team-a", "p").JSON(), false))
	f.Add(review(f, admissionv1.Create, metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}, "team-a",
		mustJSON(f, "testdata/master-worker.in.yaml"), false))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"version":"v1","kind":"Pod"},"namespace":"team-a","object":{"spec":{"containers":null}}}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	s := NewServer(Options{Config: configv1alpha1.Default()}, namespaces(optedIn()), nil, logr.Discard())
	handlers := s.Handlers()
	f.Fuzz(func(t *testing.T, body []byte) {
		for path, h := range handlers {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusOK {
				if _, err := admissionio.DecodeReviewResponse(rec.Body.Bytes()); err != nil {
					t.Fatalf("%s answered 200 with an unreadable review: %v", path, err)
				}
			} else if rec.Body.Len() == 0 {
				t.Fatalf("%s answered %d without saying why", path, rec.Code)
			}
		}
	})
}

// FuzzInjectObject feeds arbitrary objects to the injector for every kind.
func FuzzInjectObject(f *testing.F) {
	ins, _ := filepath.Glob("testdata/*.in.yaml")
	for _, in := range ins {
		for _, doc := range splitDocs(f, mustReadT(f, in)) {
			if raw, err := yaml.YAMLToJSON(doc); err == nil {
				f.Add(raw)
			}
		}
	}
	inj := &Injector{Scope: policy.Scope{Config: configv1alpha1.Default()}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, a := range jobs.Builtin().All() {
			res, err := inj.Inject(context.Background(), Request{GVK: a.GVK, Raw: raw, OptedIn: true, NamespaceAnnotations: map[string]string{}})
			if err != nil {
				continue
			}
			if _, err := admissionio.ApplyPatch(raw, res.Patch); err != nil {
				t.Fatalf("kind %v: the patch does not apply to its own object: %v", a.GVK, err)
			}
		}
	})
}

func mustJSON(t testing.TB, path string) []byte {
	t.Helper()
	raw, err := yaml.YAMLToJSON(mustReadT(t, path))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustReadT(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
