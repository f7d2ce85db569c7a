package admissionio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	jsoniter "github.com/json-iterator/go"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
)

// objectJSON decodes AdmissionReviews and admitted objects the way the API
// server reads them: field names match case-sensitively (encoding/json
// would take "Labels" for "labels", and a patch would then point at a
// member raw lacks). It is also several times faster than encoding/json on
// the webhook's hot path, which reads every pod of an opted-in namespace.
// A frozen config is immutable; its decoder cache is safe for concurrent use.
var objectJSON = jsoniter.Config{ // immutable codec, like encoding/json's own type cache.
	EscapeHTML:             true,
	CaseSensitive:          true,
	ValidateJsonRawMessage: true,
}.Froze()

// JSON returns the one codec for admitted objects and their envelope (the
// AdmissionReview), which must be read the same way as the object in it.
func JSON() jsoniter.API { return objectJSON }

// DecodeReview parses an AdmissionReview body and checks it carries a request.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	if len(body) == 0 {
		return nil, errors.New("empty request body; expected an AdmissionReview")
	}
	var review admissionv1.AdmissionReview
	if err := decodeEnvelope(body, &review); err != nil {
		return nil, fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	if review.Request == nil {
		return nil, errors.New("malformed AdmissionReview: no request")
	}
	if review.Kind != "AdmissionReview" || (review.APIVersion != "admission.k8s.io/v1" && review.APIVersion != "admission.k8s.io/v1beta1") {
		return nil, fmt.Errorf("unsupported review %s %s; expected admission.k8s.io/v1 AdmissionReview", review.APIVersion, review.Kind)
	}
	if review.Request.UID == "" {
		return nil, errors.New("malformed AdmissionReview: request has no uid")
	}
	return &review, nil
}

// decodeEnvelope decodes an AdmissionReview without passing its objects
// through the decoder: json-iterator skips a RawExtension's value key by
// key, allocating a string for every key of the object, then copies it
// twice, and that was a seventh of a pod mutation's allocations. The
// scanner finds the objects (reviewObjects); the envelope around them is
// decoded with null in their place, and Object.Raw and OldObject.Raw are
// slices of body. Their bytes are decoded as the kind they are by whoever
// reads them (jobs.Decode), which refuses malformed JSON; an object nobody
// reads is not checked, as the API server only ever sends valid JSON.
func decodeEnvelope(body []byte, review *admissionv1.AdmissionReview) error {
	objects, found, ok := reviewObjects(body)
	if !ok || (!found[0] && !found[1]) {
		return objectJSON.Unmarshal(body, review)
	}
	cut := make([]span, 0, 2)
	for i, o := range objects {
		// A null object is decoded as it is (it keeps the value of a
		// duplicate member before it, as the decoder does).
		if found[i] && string(body[o.start:o.end]) != "null" {
			cut = append(cut, o)
		}
	}
	if len(cut) == 2 && cut[1].start < cut[0].start {
		cut[0], cut[1] = cut[1], cut[0]
	}
	envelope := make([]byte, 0, len(body)-sumLen(cut)+4*len(cut))
	prev := 0
	for _, o := range cut {
		envelope = append(append(envelope, body[prev:o.start]...), "null"...)
		prev = o.end
	}
	envelope = append(envelope, body[prev:]...)
	if err := objectJSON.Unmarshal(envelope, review); err != nil {
		return err
	}
	if review.Request == nil {
		return nil
	}
	for i, o := range objects {
		if !found[i] || string(body[o.start:o.end]) == "null" {
			continue
		}
		raw := body[o.start:o.end:o.end]
		if i == 0 {
			review.Request.Object.Raw = raw
		} else {
			review.Request.OldObject.Raw = raw
		}
	}
	return nil
}

func sumLen(spans []span) int {
	n := 0
	for _, s := range spans {
		n += s.end - s.start
	}
	return n
}

// DecodeReviewResponse parses an AdmissionReview answer, as the API server would.
func DecodeReviewResponse(body []byte) (*admissionv1.AdmissionReview, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("malformed AdmissionReview response: %w", err)
	}
	if review.Response == nil {
		return nil, errors.New("AdmissionReview has no response")
	}
	return &review, nil
}

// EncodePatch is the JSON form of a patch, as an AdmissionResponse carries
// it, the same as json.Marshal(ops) gives (Operation.MarshalJSON) but in
// one buffer: Operation.MarshalJSON marshals each operation into its own
// slice, which encoding/json then validates and copies again, and was a
// tenth of the pod mutation's allocations.
func EncodePatch(ops []jsonpatch.Operation) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(96 * (len(ops) + 1))
	// One encoder for every value: it writes into b without a slice per
	// value; the newline it ends each value with is JSON whitespace.
	enc := json.NewEncoder(&b)
	b.WriteByte('[')
	for i, op := range ops {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"op":`)
		if err := writeString(&b, enc, op.Operation); err != nil {
			return nil, err
		}
		b.WriteString(`,"path":`)
		if err := writeString(&b, enc, op.Path); err != nil {
			return nil, err
		}
		// As Operation.MarshalJSON: add and replace always carry a value
		// (null when nil); other operations only a non-nil one.
		if op.Value != nil || op.Operation == "add" || op.Operation == "replace" {
			b.WriteString(`,"value":`)
			if err := enc.Encode(op.Value); err != nil {
				return nil, fmt.Errorf("encoding patch: %s: %w", op.Path, err)
			}
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// writeString writes s as a JSON string: as it is when it is printable
// ASCII that needs no escape (operations, almost every path), else as
// encoding/json escapes it (HTML characters included, like json.Marshal).
func writeString(b *bytes.Buffer, enc *json.Encoder, s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			if err := enc.Encode(s); err != nil {
				return fmt.Errorf("encoding patch: %w", err)
			}
			return nil
		}
	}
	b.WriteByte('"')
	b.WriteString(s)
	b.WriteByte('"')
	return nil
}

// ApplyPatch applies a patch to raw JSON, as the API server would.
func ApplyPatch(raw []byte, ops []jsonpatch.Operation) ([]byte, error) {
	if len(ops) == 0 {
		return raw, nil
	}
	pb, err := EncodePatch(ops)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatchapply.DecodePatch(pb)
	if err != nil {
		return nil, fmt.Errorf("decoding patch: %w", err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		return nil, fmt.Errorf("applying patch: %w", err)
	}
	return out, nil
}
