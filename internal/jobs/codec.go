package jobs

import (
	"fmt"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
)

// objectJSON is admission's one codec (admissionio.JSON): case-sensitive,
// as the API server reads objects.
var objectJSON = admissionio.JSON() // immutable codec, like encoding/json's own type cache.

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
