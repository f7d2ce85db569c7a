// Package strictjson decodes what a tenant's process wrote (a trainer's
// status body, a checkpoint outcome in an Event message) as exactly one JSON
// object with no unknown fields and nothing after it: the one strict reading
// every such parser shares, so none of them loosens it on its own.
package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeOne decodes r into v: one JSON value, unknown fields refused, and
// nothing but white space after it.
func DecodeOne(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
