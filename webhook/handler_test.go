package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// post sends body to the pod mutating endpoint and returns the HTTP status and decoded review.
func post(t *testing.T, s *Server, path string, body io.Reader, contentLength int64) (*httptest.ResponseRecorder, *admissionv1.AdmissionReview) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, body)
	req.Header.Set("Content-Type", "application/json")
	if contentLength >= 0 {
		req.ContentLength = contentLength
	}
	rec := httptest.NewRecorder()
	s.Handlers()[path].ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return rec, nil
	}
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	return rec, &out
}

func applyResponsePatch(t *testing.T, raw []byte, resp *admissionv1.AdmissionResponse) corev1.Pod {
	t.Helper()
	require.NotNil(t, resp.PatchType)
	assert.Equal(t, admissionv1.PatchTypeJSONPatch, *resp.PatchType)
	p, err := jsonpatchapply.DecodePatch(resp.Patch)
	require.NoError(t, err)
	out, err := p.Apply(raw)
	require.NoError(t, err, "the API server must be able to apply the patch to the original object")
	var got corev1.Pod
	require.NoError(t, json.Unmarshal(out, &got))
	return got
}

func TestHandlerPatchesOptedInPod(t *testing.T) {
	s := testServer(t, logr.Discard())
	raw := pod("team-a", "w0").JSON()
	rec, out := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", raw, false)), -1)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "7b1f4c1e-0000-4000-8000-00000000abcd", string(out.Response.UID))
	assert.Equal(t, "AdmissionReview", out.Kind)
	assert.True(t, out.Response.Allowed)
	got := applyResponsePatch(t, raw, out.Response)
	c := got.Spec.Containers[0]
	assert.Equal(t, "prestop,taskd,recover-strategy,restart-rules", got.Annotations[contract.AnnotationInjected], "a CPU pod gets no GPU default")
	assert.Equal(t, "true", got.Labels[contract.LabelManaged])
	require.NotNil(t, c.Lifecycle)
	assert.Equal(t, []string{"/opt/trainguard/bin/trainguard-agent", "prestop", "--timeout=60s"}, c.Lifecycle.PreStop.Exec.Command)
	assert.Equal(t, corev1.ContainerPort{Name: "taskd-port", ContainerPort: 9601, Protocol: corev1.ProtocolTCP}, c.Ports[0])
	assert.Empty(t, c.Resources.Limits, "a CPU pod gets no GPU default")
	assert.Equal(t, int64(90), *got.Spec.TerminationGracePeriodSeconds)
	require.Len(t, got.Spec.InitContainers, 1)
	assert.Equal(t, "trainguard-agent-install", got.Spec.InitContainers[0].Name)
}

func TestHandlerLeavesNamespaceThatDidNotOptIn(t *testing.T) {
	s := testServer(t, logr.Discard())
	for _, ns := range []string{"other", "kube-system", "trainguard-system", "missing"} {
		rec, out := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), ns, pod(ns, "w0").JSON(), false)), -1)
		require.Equal(t, http.StatusOK, rec.Code, ns)
		assert.True(t, out.Response.Allowed, ns)
		assert.Empty(t, out.Response.Patch, "namespace %s must not be patched", ns)
		assert.Nil(t, out.Response.PatchType, ns)
	}
}

func TestHandlerOptOutAnnotation(t *testing.T) {
	s := testServer(t, logr.Discard())
	raw := pod("team-a", "w0").WithAnnotation(contract.AnnotationInject, contract.InjectDisabled).JSON()
	_, out := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", raw, false)), -1)
	assert.True(t, out.Response.Allowed)
	assert.Empty(t, out.Response.Patch)
}

func TestHandlerRejectsMalformedBodies(t *testing.T) {
	s := testServer(t, logr.Discard())
	cases := map[string]string{
		"not json":        "{this is not json",
		"empty":           "",
		"no request":      `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		"wrong envelope":  `{"apiVersion":"v1","kind":"Pod","request":{"uid":"x"}}`,
		"request no uid":  `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`,
		"object not json": `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"CREATE","namespace":"team-a","kind":{"version":"v1","kind":"Pod"},"object":"str"}}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			rec, _ := post(t, s, PathMutatePod, strings.NewReader(body), -1)
			if name == "object not json" {
				// A decodable review whose object is garbage: answered in-band, refused with an explanation.
				require.Equal(t, http.StatusOK, rec.Code)
				var out admissionv1.AdmissionReview
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
				assert.False(t, out.Response.Allowed)
				assert.Contains(t, out.Response.Result.Message, "could not process")
				return
			}
			assert.Equal(t, http.StatusBadRequest, rec.Code)
			assert.NotEmpty(t, strings.TrimSpace(rec.Body.String()), "a 400 must say why")
		})
	}
}

// countingReader records how much of the body the handler consumed.
type countingReader struct {
	n, limit int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= c.limit {
		return 0, io.EOF
	}
	if int64(len(p)) > c.limit-c.n {
		p = p[:c.limit-c.n]
	}
	for i := range p {
		p[i] = ' '
	}
	c.n += int64(len(p))
	return len(p), nil
}

func TestHandlerRefusesHugeBodiesWithoutReadingThem(t *testing.T) {
	s := testServer(t, logr.Discard())
	const size = 64 << 20
	t.Run("declared length", func(t *testing.T) {
		body := &countingReader{limit: size}
		rec, _ := post(t, s, PathMutatePod, body, size)
		assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		assert.Zero(t, body.n, "a body declared too large must not be read at all")
		assert.Contains(t, rec.Body.String(), "limit")
	})
	t.Run("chunked", func(t *testing.T) {
		body := &countingReader{limit: size}
		rec, _ := post(t, s, PathMutatePod, body, -1)
		assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		assert.LessOrEqual(t, body.n, int64(MaxRequestBytes+64*1024), "reading must stop at the limit")
	})
}

func TestHandlerUnexpectedKindIsAllowedAndLogged(t *testing.T) {
	var logs strings.Builder
	log := funcr.New(func(prefix, args string) { logs.WriteString(args + "\n") }, funcr.Options{Verbosity: 1})
	s := testServer(t, log)
	gvk := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	_, out := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, gvk, "team-a", []byte(`{"kind":"Deployment"}`), false)), -1)
	assert.True(t, out.Response.Allowed)
	assert.Empty(t, out.Response.Patch)
	assert.Contains(t, logs.String(), "unexpected kind")
	assert.Contains(t, logs.String(), "Deployment")
}

func TestHandlerDryRunGivesSamePatch(t *testing.T) {
	s := testServer(t, logr.Discard())
	raw := pod("team-a", "w0").JSON()
	_, wet := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", raw, false)), -1)
	_, dry := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", raw, true)), -1)
	assert.Equal(t, applyResponsePatch(t, raw, wet.Response), applyResponsePatch(t, raw, dry.Response))
	// The patch alone must carry the result: nothing was remembered from the first call.
	_, again := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", raw, true)), -1)
	assert.Equal(t, applyResponsePatch(t, raw, dry.Response), applyResponsePatch(t, raw, again.Response))
}

func TestHandlerPassesDeleteAndConnect(t *testing.T) {
	s := testServer(t, logr.Discard())
	for _, op := range []admissionv1.Operation{admissionv1.Delete, admissionv1.Connect} {
		_, out := post(t, s, PathMutatePod, bytes.NewReader(review(t, op, podGVK(), "team-a", pod("team-a", "w0").JSON(), false)), -1)
		assert.True(t, out.Response.Allowed, op)
		assert.Empty(t, out.Response.Patch, op)
	}
}

func TestHandlerWarnsOnBadAnnotation(t *testing.T) {
	s := testServer(t, logr.Discard())
	raw := pod("team-a", "w0").WithAnnotation(contract.AnnotationGPULimit, "lots").
		With(func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"--backend=nccl"} }).JSON()
	_, out := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", raw, false)), -1)
	require.True(t, out.Response.Allowed)
	require.Len(t, out.Response.Warnings, 1)
	assert.Contains(t, out.Response.Warnings[0], `trainguard.io/gpu-limit="lots"`)
	got := applyResponsePatch(t, raw, out.Response)
	assert.Equal(t, "1", got.Spec.Containers[0].Resources.Limits.Name("nvidia.com/gpu", "").String(), "the default applies")
}
