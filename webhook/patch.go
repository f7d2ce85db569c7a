package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
)

// typedPatch computes the JSON patch that turns raw into raw-plus-mutations,
// where the mutations are the difference between base and mutated: the same
// object serialised from trainguard's partial types before and after the
// mutators ran. Diffing the typed forms keeps every field those types do not
// know out of the patch, so unknown fields survive untouched. Because the
// typed form may contain empty parents the user's raw object lacks (e.g. an
// absent template metadata), every operation is checked against raw and, if
// its parent is missing, rewritten to add the nearest missing ancestor.
func typedPatch(raw, base, mutated []byte) ([]jsonpatch.Operation, error) {
	if bytes.Equal(base, mutated) {
		return nil, nil
	}
	ops, err := jsonpatch.CreatePatch(base, mutated)
	if err != nil {
		return nil, fmt.Errorf("diffing mutated object: %w", err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decoding object: %w", err)
	}
	return anchor(ops, doc), nil
}

// anchor rewrites ops whose parent path does not exist in doc.
func anchor(ops []jsonpatch.Operation, doc any) []jsonpatch.Operation {
	out := make([]jsonpatch.Operation, 0, len(ops))
	// Ops folded into an added ancestor, by that ancestor's path.
	folded := map[string]map[string]any{}
	for _, op := range ops {
		segs := splitPointer(op.Path)
		depth := existingDepth(doc, segs[:len(segs)-1])
		if depth == len(segs)-1 {
			if op.Operation == "remove" && existingDepth(doc, segs) < len(segs) {
				continue // nothing to remove in the user's object
			}
			if op.Operation == "replace" && existingDepth(doc, segs) < len(segs) {
				op.Operation = "add"
			}
			out = append(out, op)
			continue
		}
		if op.Operation == "remove" {
			continue
		}
		anc := joinPointer(segs[:depth+1])
		root, ok := folded[anc]
		if !ok {
			root = map[string]any{}
			folded[anc] = root
			out = append(out, jsonpatch.Operation{Operation: "add", Path: anc, Value: root})
		}
		setNested(root, segs[depth+1:], op.Value)
	}
	return out
}

// existingDepth returns how many leading segments of segs resolve in doc.
func existingDepth(doc any, segs []string) int {
	cur := doc
	for i, s := range segs {
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[s]
			if !ok || next == nil {
				return i
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 || n >= len(v) {
				return i
			}
			cur = v[n]
		default:
			return i
		}
	}
	return len(segs)
}

func setNested(m map[string]any, segs []string, value any) {
	for _, s := range segs[:len(segs)-1] {
		next, ok := m[s].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[s] = next
		}
		m = next
	}
	m[segs[len(segs)-1]] = value
}

var pointerDecoder = strings.NewReplacer("~1", "/", "~0", "~")
var pointerEncoder = strings.NewReplacer("~", "~0", "/", "~1")

func splitPointer(p string) []string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i := range parts {
		parts[i] = pointerDecoder.Replace(parts[i])
	}
	return parts
}

func joinPointer(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(pointerEncoder.Replace(s))
	}
	return b.String()
}
