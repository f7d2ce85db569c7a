// Package crdfields holds the field structure of the operators' real CRD
// schemas, extracted at build time (go generate, from the Go module cache)
// and embedded: which properties each object may have and their JSON
// types. `trainguard validate` checks objects against it as the API server
// does with fieldValidation=Strict, so a field the CRD does not declare
// (spec.runPolicy.backoffLimt) is refused offline as online.
//
// Embedded: kubeflow.org/v1 PyTorchJob (training-operator v1.9.4) and
// Kubeflow Trainer's TrainJob, TrainingRuntime and ClusterTrainingRuntime
// in every supported release (TrainerReleases; a runtime's template is
// the JobSet spec of the JobSet release Trainer pins). KubeDL's CRD is
// trainguard's own minimal one: nothing to embed.
// Value constraints (enum, minimum, maximum, maxLength, maxItems,
// required) are extracted and checked; patterns, formats and CEL rules
// are not (the Go types check quantities and int32 ranges).
package crdfields

//go:generate go run ../../../hack/gen-crd-fields

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/typecheck"
)

//go:embed *.json
var files embed.FS

// Node is one schema node: its JSON type, whether it keeps unknown fields
// (x-kubernetes-preserve-unknown-fields), its properties, the schema of its
// items and of a map's values.
type Node struct {
	Type       string           `json:"t,omitempty"`
	Unknown    bool             `json:"u,omitempty"`
	Props      map[string]*Node `json:"p,omitempty"`
	Items      *Node            `json:"i,omitempty"`
	Additional *Node            `json:"a,omitempty"`
	// Value constraints, checked as the API server's schema validation
	// does (its words): the allowed values, the bounds of a number, the
	// properties an object must have, the longest string and list.
	Enum      []any        `json:"e,omitempty"`
	Minimum   *json.Number `json:"min,omitempty"`
	Maximum   *json.Number `json:"max,omitempty"`
	Required  []string     `json:"r,omitempty"`
	MaxLength *int64       `json:"ml,omitempty"`
	MaxItems  *int64       `json:"mi,omitempty"`
}

// TrainerReleases are the Kubeflow Trainer releases trainguard supports
// (validators/trainer_versions.go), oldest first; the CRDs of each are
// embedded, since offline the cluster's release is unknown.
var TrainerReleases = []string{"v2.0.0", "v2.3.0"}

// FileName is the embedded file of gvk's schema.
func FileName(gvk schema.GroupVersionKind) string {
	return FileNameAt(gvk, "")
}

// FileNameAt is the embedded file of gvk's schema in an operator release
// ("" when only one release is embedded).
func FileNameAt(gvk schema.GroupVersionKind, release string) string {
	name := strings.ToLower(gvk.Kind) + "." + gvk.Group + "_" + gvk.Version
	if release != "" {
		name += "@" + release
	}
	return name + ".json"
}

// For returns the schema of gvk; false when none is embedded.
func For(gvk schema.GroupVersionKind) (*Node, bool, error) {
	return ForRelease(gvk, "")
}

// ForRelease returns the schema of gvk in an operator release; false when
// none is embedded.
func ForRelease(gvk schema.GroupVersionKind, release string) (*Node, bool, error) {
	name := FileNameAt(gvk, release)
	data, err := files.ReadFile(name)
	if err != nil {
		return nil, false, nil // no schema for this kind: nothing to check
	}
	var n Node
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // enum values compare with the object's json.Numbers
	if err := dec.Decode(&n); err != nil {
		return nil, false, fmt.Errorf("embedded schema %s: %w", name, err)
	}
	return &n, true, nil
}

// Check returns, as the API server's strict field validation would refuse
// them, every field obj has that the schema does not declare, every value
// whose JSON type the schema does not allow, and every value outside the
// schema's enum, minimum, maximum, maxLength or maxItems, and every
// required property missing, each as
// "<field path>: <message>". metadata is Kubernetes' own, checked elsewhere.
func Check(obj map[string]any, root *Node) []string {
	var out []string
	for _, k := range typecheck.SortedKeys(obj) {
		if k == "metadata" {
			continue
		}
		walk(obj[k], root.Props[k], field.NewPath(k), root, k, &out)
	}
	return out
}

func walk(v any, n *Node, p *field.Path, parent *Node, name string, out *[]string) {
	if n == nil {
		if !parent.Unknown {
			*out = append(*out, unknown(p, name, parent))
		}
		return
	}
	if v == nil {
		return
	}
	if msg := typeProblem(v, n.Type); msg != "" {
		*out = append(*out, fmt.Sprintf("%s: Invalid value: %s: %s", p, typecheck.ValueString(v), msg))
		return
	}
	for _, e := range valueProblems(v, n, p) {
		*out = append(*out, e.Error())
	}
	switch x := v.(type) {
	case map[string]any:
		for _, r := range n.Required {
			if _, ok := x[r]; !ok {
				*out = append(*out, field.Required(p.Child(r), "").Error())
			}
		}
		for _, k := range typecheck.SortedKeys(x) {
			switch {
			case n.Additional != nil && n.Props == nil:
				walk(x[k], n.Additional, p.Key(k), n, k, out)
			default:
				// No property declared (and no map values): the API
				// server prunes every field here, so strict refuses each.
				walk(x[k], n.Props[k], p.Child(k), n, k, out)
			}
		}
	case []any:
		if n.Items != nil {
			for i, e := range x {
				walk(e, n.Items, p.Index(i), n, "", out)
			}
		}
	}
}

// unknown is the line for a field the schema does not declare, naming the
// nearest declared one.
func unknown(p *field.Path, name string, parent *Node) string {
	known := make([]string, 0, len(parent.Props))
	for k := range parent.Props {
		known = append(known, k)
	}
	msg := fmt.Sprintf("%s: unknown field %q", p, name)
	if near := contract.Nearest(name, known); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg
}

// typeProblem checks v against an OpenAPI type, in the API server's words.
func typeProblem(v any, t string) string {
	ok := true
	switch t {
	case "object":
		_, ok = v.(map[string]any)
	case "array":
		_, ok = v.([]any)
	case "string":
		_, ok = v.(string)
	case "boolean":
		_, ok = v.(bool)
	case "integer":
		n, isNum := v.(json.Number)
		ok = isNum && !strings.ContainsAny(n.String(), ".eE")
	case "number":
		_, ok = v.(json.Number)
	}
	if ok {
		return ""
	}
	return "must be of type " + t
}

// valueProblems checks v against the node's enum and bounds, with the
// errors (and words) the API server's schema validation returns.
func valueProblems(v any, n *Node, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(n.Enum) > 0 && !slices.ContainsFunc(n.Enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		allowed := make([]string, len(n.Enum))
		for i, e := range n.Enum {
			allowed[i] = fmt.Sprint(e)
		}
		errs = append(errs, field.NotSupported(p, v, allowed))
	}
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			break
		}
		if n.Minimum != nil {
			if lo, _ := n.Minimum.Float64(); f < lo {
				errs = append(errs, field.Invalid(p, v, fmt.Sprintf("%s in body should be greater than or equal to %s", p, n.Minimum)))
			}
		}
		if n.Maximum != nil {
			if hi, _ := n.Maximum.Float64(); f > hi {
				errs = append(errs, field.Invalid(p, v, fmt.Sprintf("%s in body should be less than or equal to %s", p, n.Maximum)))
			}
		}
	case string:
		if n.MaxLength != nil && int64(utf8.RuneCountInString(x)) > *n.MaxLength {
			errs = append(errs, field.TooLong(p, "", int(*n.MaxLength)))
		}
	case []any:
		if n.MaxItems != nil && int64(len(x)) > *n.MaxItems {
			errs = append(errs, field.TooMany(p, len(x), int(*n.MaxItems)))
		}
	}
	return errs
}
