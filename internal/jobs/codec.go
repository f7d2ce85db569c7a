package jobs

import (
	"fmt"

	jsoniter "github.com/json-iterator/go"
)

// objectJSON decodes AdmissionReviews and admitted objects the way the API
// server reads them: field names match case-sensitively (encoding/json
// would take "Labels" for "labels", and a patch would then point at a
// member raw lacks). It is also several times faster than encoding/json on
// the webhook's hot path, which reads every pod of an opted-in namespace.
// A frozen config is immutable; its decoder cache is safe for concurrent use.
var objectJSON = jsoniter.Config{ //nolint:gochecknoglobals // immutable codec, like encoding/json's own type cache.
	EscapeHTML:             true,
	CaseSensitive:          true,
	ValidateJsonRawMessage: true,
}.Froze()

// Decode decodes an admitted object (see objectJSON). It is the one JSON
// decoder for admitted objects: the mutating and validating paths, online
// and offline, read the same bytes the same way.
//
// A decoder panic becomes an error: json-iterator hands a value cut off at
// the end of the input to a field's UnmarshalJSON as an empty slice, and
// apimachinery's IntOrString indexes it (found by FuzzInjectObject: a
// preStop httpGet port at the end of a truncated object). The webhook
// refuses such an object with an explanation instead of dropping the
// connection.
func Decode(raw []byte, into any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed JSON: the decoder failed on it (%v)", r)
		}
	}()
	return objectJSON.Unmarshal(raw, into)
}

// JSON returns the codec Decode uses, for the admission envelope (the
// AdmissionReview), which must be read the same way as the object in it.
func JSON() jsoniter.API { return objectJSON }
