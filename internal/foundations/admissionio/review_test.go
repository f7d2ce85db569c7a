package admissionio

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
)

func reviewSeeds() []string {
	return []string{
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"version":"v1","kind":"Pod"},"namespace":"a","object":{"metadata":{"name":"p","labels":{"k":"v"}},"spec":{"containers":[{"name":"pytorch","args":["a","}"]}]}}}}`,
		`{"request":{"oldObject" : {"a":[1,2,{"b":null}]} ,"uid":"u","object":{"x":"\"}"}},"kind":"AdmissionReview"}`,
		`{"request":{"object":{"first":1},"object":{"second":2}}}`,
		`{"request":{"object":{"first":1},"object":null}}`,
		`{"request":{"object":{"a":1}},"request":{"uid":"later"}}`,
		`{"request":null}`,
		`{"request":{"object":[1,2],"oldObject":"s","obj\u0065ct":{"escaped":true}}}`,
		`{"request":{"object":{"a":1},"dryRun":true}} `,
		`{"request":{"object":{"a":1}}`,
		`{"request":{"object":{"a":1},"uid":5}}`,
		`{"Request":{"object":{"a":1}},"request":{"Object":{"b":2}}}`,
	}
}

// decodeWhole is what DecodeReview did before decodeEnvelope: the decoder
// over the whole body.
func decodeWhole(body []byte) (review admissionv1.AdmissionReview, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errPanicked
		}
	}()
	err = objectJSON.Unmarshal(body, &review)
	return review, err
}

var errPanicked = assert.AnError

func trimRaw(r *admissionv1.AdmissionReview) {
	if r.Request != nil {
		r.Request.Object.Raw = bytes.TrimSpace(r.Request.Object.Raw)
		r.Request.OldObject.Raw = bytes.TrimSpace(r.Request.OldObject.Raw)
		if len(r.Request.Object.Raw) == 0 {
			r.Request.Object.Raw = nil
		}
		if len(r.Request.OldObject.Raw) == 0 {
			r.Request.OldObject.Raw = nil
		}
	}
}

func checkEnvelope(t *testing.T, body []byte) {
	t.Helper()
	want, errWhole := decodeWhole(body)
	var got admissionv1.AdmissionReview
	errCut := decodeEnvelope(body, &got)
	if errWhole != nil {
		// The objects' own bytes are left to whoever decodes them; the
		// envelope around them is refused alike.
		if errCut == nil {
			require.NotNil(t, got.Request, "only a request's objects may go unchecked")
			assert.False(t, json.Valid(got.Request.Object.Raw) && json.Valid(orNull(got.Request.OldObject.Raw)) && json.Valid(body),
				"the whole body was refused (%v) but the cut one is valid JSON", errWhole)
		}
		return
	}
	require.NoError(t, errCut, "the cut envelope must decode when the whole body does")
	trimRaw(&want)
	trimRaw(&got)
	assert.Equal(t, want, got)
}

func orNull(b []byte) []byte {
	if b == nil {
		return []byte("null")
	}
	return b
}

func TestDecodeEnvelopeIsTheWholeDecode(t *testing.T) {
	for _, s := range reviewSeeds() {
		t.Run(s, func(t *testing.T) { checkEnvelope(t, []byte(s)) })
	}
	var r admissionv1.AdmissionReview
	require.NoError(t, decodeEnvelope([]byte(reviewSeeds()[0]), &r))
	assert.JSONEq(t, `{"metadata":{"name":"p","labels":{"k":"v"}},"spec":{"containers":[{"name":"pytorch","args":["a","}"]}]}}`, string(r.Request.Object.Raw))
}

// FuzzDecodeEnvelope: cutting the objects out never changes what a review
// decodes to.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range reviewSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(checkEnvelope)
}
