package webhook

import (
	"github.com/trainguard/trainguard/internal/testing/builders"

	"context"
	"encoding/json"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/policy"
)

// namespaces is a static NamespaceAnnotations for tests.
func namespaces(m map[string]map[string]string) policy.NamespaceAnnotations {
	return func(_ context.Context, name string) (map[string]string, bool, error) {
		ann, ok := m[name]
		return ann, ok, nil
	}
}

func optedIn() map[string]map[string]string {
	return map[string]map[string]string{
		"team-a":   {contract.AnnotationInject: contract.InjectEnabled},
		"other":    {},
		"team-ckp": {contract.AnnotationInject: contract.InjectEnabled, contract.AnnotationCheckpointClaim: "ckpt"},
	}
}

func testServer(t testing.TB, log logr.Logger) *Server {
	t.Helper()
	return NewServer(Options{Config: configv1alpha1.Default(), OwnNamespace: "trainguard-system"}, namespaces(optedIn()), nil, log)
}

// pod is the handler tests' pod: one pytorch container.
func pod(ns, name string) *builders.PodWrapper { return builders.MakePod(ns, name) }

// review wraps an object into an AdmissionReview body as the API server sends it.
func review(t testing.TB, op admissionv1.Operation, gvk metav1.GroupVersionKind, ns string, raw []byte, dryRun bool) []byte {
	t.Helper()
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("7b1f4c1e-0000-4000-8000-00000000abcd"), Kind: gvk, Operation: op,
			Namespace: ns, Object: runtime.RawExtension{Raw: raw}, DryRun: &dryRun,
		},
	}
	body, err := json.Marshal(&ar)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func podGVK() metav1.GroupVersionKind { return metav1.GroupVersionKind{Version: "v1", Kind: "Pod"} }
