// Package crdfields holds the field structure of the operators' real CRD
// schemas, extracted at build time (go generate, from the Go module cache)
// and embedded: which properties each object may have and their JSON
// types. `trainguard validate` checks objects against it as the API server
// does with fieldValidation=Strict, so a field the CRD does not declare
// (spec.runPolicy.backoffLimt) is refused offline as online.
//
// Only kubeflow.org/v1 PyTorchJob (training-operator v1.9.4) is embedded:
// KubeDL's CRD is trainguard's own minimal one, and Kubeflow Trainer's
// kinds are judged against the release the cluster runs (a warning).
// Enums, minimums and other value constraints are not extracted.
package crdfields

//go:generate go run ../../../hack/gen-crd-fields

import (
	"embed"
	"encoding/json"
	"fmt"
	"strings"

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
}

// FileName is the embedded file of gvk's schema.
func FileName(gvk schema.GroupVersionKind) string {
	return strings.ToLower(gvk.Kind) + "." + gvk.Group + "_" + gvk.Version + ".json"
}

// For returns the schema of gvk; false when none is embedded.
func For(gvk schema.GroupVersionKind) (*Node, bool, error) {
	data, err := files.ReadFile(FileName(gvk))
	if err != nil {
		return nil, false, nil //nolint:nilerr // no schema for this kind: nothing to check
	}
	var n Node
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, false, fmt.Errorf("embedded schema %s: %w", FileName(gvk), err)
	}
	return &n, true, nil
}

// Check returns, as the API server's strict field validation would refuse
// them, every field obj has that the schema does not declare and every
// value whose JSON type the schema does not allow, each as
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
	switch x := v.(type) {
	case map[string]any:
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
