// Package typecheck checks a decoded JSON document against a Go type the
// way the API server's schema validation does (kubectl apply
// --validate=strict): every value of the wrong type, every integer
// overflow, every unknown field, each with its field path, all at once.
// `trainguard validate` checks objects with it, and the configuration
// file is checked with it.
package typecheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Check checks a decoded JSON document against the Go type of its kind
// the way the API server's schema does (kubectl apply --validate=strict),
// and returns every problem, not only the first: a value of the wrong type,
// an integer outside its type's range, an unknown field. Each line is
// "<field path>: <message>". v must come from DecodeJSON (numbers kept
// exact). Unknown fields of Kubernetes' own types are all reported; in
// trainguard's partial copies of other types only near misses of known
// fields (see unknownField).
func Check(v any, t reflect.Type) (typeErrs, unknown []string) {
	out := problems{}
	walkType(v, t, nil, &out)
	return out.types, out.unknown
}

// CheckComplete is Check for a type that has every field its documents
// may hold (trainguard's own configuration): every unknown field is one.
func CheckComplete(v any, t reflect.Type) (typeErrs, unknown []string) {
	out := problems{complete: true}
	walkType(v, t, nil, &out)
	return out.types, out.unknown
}

// DecodeJSON decodes a JSON document keeping numbers exact (json.Number).
func DecodeJSON(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// problems are what walkType found: type errors, and unknown fields apart
// (for kinds whose newer releases add fields, they are only warnings).
type problems struct {
	types, unknown []string
	complete       bool // every unknown field counts, not only near misses
}

func (p *problems) typeError(path *field.Path, v any, msg string) {
	p.types = append(p.types, fmt.Sprintf("%s: Invalid value: %s: %s", pathString(path), ValueString(v), msg))
}

func walkType(v any, t reflect.Type, p *field.Path, out *problems) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil { // null is the zero value of any field
		return
	}
	if special, ok := specialTypes()[t]; ok {
		if msg := special(v); msg != "" {
			out.typeError(p, v, msg)
		}
		return
	}
	if reflect.PointerTo(t).Implements(reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()) {
		return // a type that decodes itself; its decoder decides
	}
	if msg := kindMismatch(v, t); msg != "" {
		out.typeError(p, v, msg)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		walkStruct(v.(map[string]any), t, p, out)
	case reflect.Map:
		m := v.(map[string]any)
		for _, k := range SortedKeys(m) {
			walkType(m[k], t.Elem(), p.Key(k), out)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // []byte is a base64 string
			return
		}
		for i, e := range v.([]any) {
			walkType(e, t.Elem(), p.Index(i), out)
		}
	}
}

// walkStruct checks each member of a JSON object against the struct's
// fields, by their json names (inline members included).
func walkStruct(m map[string]any, t reflect.Type, p *field.Path, out *problems) {
	fields := jsonFields(t)
	for _, k := range SortedKeys(m) {
		ft, ok := fields[k]
		if !ok {
			if line, typo := unknownField(t, p, k, fields); typo || out.complete {
				out.unknown = append(out.unknown, line)
			}
			continue
		}
		walkType(m[k], ft, p.Child(k), out)
	}
}

// unknownField reports a field t does not have. Kubernetes' own types
// (k8s.io/api, apimachinery) are complete, so every unknown field in them
// is an error, as kubectl apply --validate=strict says. trainguard's copies
// of the operators' types keep only the fields it reads (the rest pass
// through untouched), so there only a near miss of a known field counts:
// "replica" next to "replicas" is a typo, "cleanPodPolicy" is a real field.
func unknownField(t reflect.Type, p *field.Path, name string, fields map[string]reflect.Type) (string, bool) {
	known := make([]string, 0, len(fields))
	for f := range fields {
		known = append(known, f)
	}
	msg := fmt.Sprintf("%s: unknown field %q", pathString(p.Child(name)), name)
	near := contract.Nearest(name, known)
	if near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg, near != "" || strings.HasPrefix(t.PkgPath(), "k8s.io/")
}

// jsonFields maps the json names of t's fields (and of inline or embedded
// structs' fields) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if (f.Anonymous && name == "") || strings.Contains(opts, "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					fields[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// kindMismatch says what is wrong when v's JSON type cannot hold t, in
// the words of the API server's schema validation ("must be of type integer").
func kindMismatch(v any, t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		if _, ok := v.(map[string]any); !ok {
			return "must be of type object"
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return mustBeString(v)
		}
		if _, ok := v.([]any); !ok {
			return "must be of type array"
		}
	case reflect.String:
		return mustBeString(v)
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return "must be of type boolean"
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return integerProblem(v, t)
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(json.Number); !ok {
			return "must be of type number"
		}
	}
	return ""
}

func mustBeString(v any) string {
	if _, ok := v.(string); !ok {
		return "must be of type string"
	}
	return ""
}

// integerProblem refuses a non-integer and an integer that overflows t
// (an int32 field holding 3000000000).
func integerProblem(v any, t reflect.Type) string {
	n, ok := v.(json.Number)
	if !ok {
		return "must be of type integer"
	}
	bits := t.Bits()
	typeName := t.Kind().String()
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		if _, err := strconv.ParseUint(n.String(), 10, bits); err != nil {
			return integerRangeMessage(n, typeName, "0", strconv.FormatUint(math.MaxUint64>>(64-bits), 10))
		}
		return ""
	}
	if _, err := strconv.ParseInt(n.String(), 10, bits); err != nil {
		return integerRangeMessage(n, typeName, strconv.FormatInt(-1<<(bits-1), 10), strconv.FormatInt(1<<(bits-1)-1, 10))
	}
	return ""
}

func integerRangeMessage(n json.Number, typeName, lo, hi string) string {
	if strings.ContainsAny(n.String(), ".eE") {
		return "must be of type integer"
	}
	return fmt.Sprintf("must be of type %s: between %s and %s", typeName, lo, hi)
}

// specialTypes are the types that decode from JSON in their own way.
func specialTypes() map[reflect.Type]func(any) string {
	anything := func(any) string { return "" }
	return map[reflect.Type]func(any) string{
		reflect.TypeOf(resource.Quantity{}):      checkQuantity,
		reflect.TypeOf(intstr.IntOrString{}):     checkIntOrString,
		reflect.TypeOf(metav1.Time{}):            mustBeString,
		reflect.TypeOf(metav1.MicroTime{}):       mustBeString,
		reflect.TypeOf(metav1.Duration{}):        mustBeString,
		reflect.TypeOf(metav1.FieldsV1{}):        anything,
		reflect.TypeOf(runtime.RawExtension{}):   anything,
		reflect.TypeOf(json.RawMessage{}):        anything,
		reflect.TypeOf((*any)(nil)).Elem():       anything,
		reflect.TypeOf(map[string]any{}):         anything,
		reflect.TypeOf(resource.QuantityValue{}): checkQuantity,
	}
}

func checkQuantity(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	default:
		return "must be of type string or number (a quantity such as 1, 500m or 4Gi)"
	}
	if _, err := resource.ParseQuantity(s); err != nil {
		return "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
	}
	return ""
}

func checkIntOrString(v any) string {
	switch x := v.(type) {
	case string:
		return ""
	case json.Number:
		if _, err := strconv.ParseInt(x.String(), 10, 32); err != nil {
			return "must be a string or an integer between -2147483648 and 2147483647"
		}
		return ""
	}
	return "must be of type string or integer"
}

func pathString(p *field.Path) string {
	if p == nil {
		return "<document>"
	}
	return p.String()
}

// ValueString renders a bad value as the API server does: strings quoted,
// numbers as written, objects and arrays by their type.
func ValueString(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprint(v)
}

// SortedKeys are m's keys in order, so every report lists problems alike.
func SortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
