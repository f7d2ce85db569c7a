// Package objdiff is the field-level diff of two Kubernetes objects that
// `trainguard inject --diff` prints and `make demo` summarises: named
// lists (containers, env, ports, volumes) are matched by name, so a path
// reads spec.containers[pytorch].lifecycle.preStop, not an index.
package objdiff

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Change is one difference between two objects.
type Change struct {
	Op   byte   // '+' added, '-' removed, '~' changed
	Path string // e.g. spec.containers[pytorch].ports[taskd-port]
	Old  any
	New  any
}

// Diff compares two objects decoded from JSON (maps, lists, scalars).
func Diff(before, after map[string]any) []Change {
	var out []Change
	diffValue(before, after, "", &out)
	return out
}

func diffValue(b, a any, path string, out *[]Change) {
	switch {
	case b == nil && a == nil:
		return
	case b == nil:
		if am, ok := a.(map[string]any); ok && len(am) > 0 {
			diffMap(map[string]any{}, am, path, out)
			return
		}
		if al, ok := a.([]any); ok && namedList(al) {
			diffList(nil, al, path, out)
			return
		}
		*out = append(*out, Change{Op: '+', Path: path, New: a})
		return
	case a == nil:
		*out = append(*out, Change{Op: '-', Path: path, Old: b})
		return
	}
	bm, bok := b.(map[string]any)
	am, aok := a.(map[string]any)
	if bok && aok {
		diffMap(bm, am, path, out)
		return
	}
	bl, bok := b.([]any)
	al, aok := a.([]any)
	if bok && aok && namedList(bl) && namedList(al) {
		diffList(bl, al, path, out)
		return
	}
	if !reflect.DeepEqual(b, a) {
		*out = append(*out, Change{Op: '~', Path: path, Old: b, New: a})
	}
}

func diffMap(b, a map[string]any, path string, out *[]Change) {
	keys := map[string]bool{}
	for k := range b {
		keys[k] = true
	}
	for k := range a {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		diffValue(b[k], a[k], joinKey(path, k), out)
	}
}

// diffList matches list elements by name (containers, env, ports, volumes...).
func diffList(b, a []any, path string, out *[]Change) {
	byName := map[string]any{}
	for _, e := range b {
		byName[e.(map[string]any)["name"].(string)] = e
	}
	seen := map[string]bool{}
	for _, e := range a {
		m := e.(map[string]any)
		name := m["name"].(string)
		seen[name] = true
		p := path + "[" + name + "]"
		if old, ok := byName[name]; ok {
			diffValue(old, e, p, out)
			continue
		}
		*out = append(*out, Change{Op: '+', Path: p, New: withoutName(m)})
	}
	for _, e := range b {
		if name := e.(map[string]any)["name"].(string); !seen[name] {
			*out = append(*out, Change{Op: '-', Path: path + "[" + name + "]", Old: withoutName(e.(map[string]any))})
		}
	}
}

// namedList is a non-empty list of maps with unique string names.
func namedList(l []any) bool {
	if len(l) == 0 {
		return false
	}
	seen := map[string]bool{}
	for _, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		n, ok := m["name"].(string)
		if !ok || seen[n] {
			return false
		}
		seen[n] = true
	}
	return true
}

// withoutName drops the name (it is in the path), the API server's
// per-container defaults, and unwraps {name, value} env vars.
func withoutName(m map[string]any) any {
	c := map[string]any{}
	for k, v := range m {
		c[k] = v
	}
	delete(c, "name")
	if c["terminationMessagePath"] == "/dev/termination-log" {
		delete(c, "terminationMessagePath")
	}
	if c["terminationMessagePolicy"] == "File" {
		delete(c, "terminationMessagePolicy")
	}
	if r, ok := c["resources"].(map[string]any); ok && len(r) == 0 {
		delete(c, "resources")
	}
	if v, ok := c["value"]; ok && len(c) == 1 {
		return v
	}
	return c
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// mapsOfKeys hold user-chosen keys (label names, resource names): shown as [key].
var mapsOfKeys = regexp.MustCompile(`(^|\.)(annotations|labels|limits|requests|nodeSelector)$`)

func joinKey(path, k string) string {
	if !plainKey.MatchString(k) || mapsOfKeys.MatchString(path) {
		return path + "[" + k + "]"
	}
	if path == "" {
		return k
	}
	return path + "." + k
}

// Compact renders a value on one line, YAML flow style.
func Compact(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case string:
		if t == "" || strings.ContainsAny(t, " ,:{}[]'\"#&*!|>%@`\t\n") || t == "true" || t == "false" || isNumber(t) {
			return strconv.Quote(t)
		}
		return t
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+": "+Compact(t[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, 0, len(t))
		for _, e := range t {
			parts = append(parts, Compact(e))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	default:
		return fmt.Sprint(t)
	}
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// Render is one change as a line (a long added map as one key a line),
// path standing for its path (a caller may shorten it).
func Render(c Change, path string) string {
	switch c.Op {
	case '+':
		return "+ " + path + ":" + block(c.New, len(path))
	case '-':
		return "- " + path + ":" + block(c.Old, len(path))
	default:
		old, nw := Compact(c.Old), Compact(c.New)
		if len(path)+len(old)+len(nw) > 90 {
			return "~ " + path + ":\n        was " + old + "\n        now " + nw
		}
		return "~ " + path + ": " + old + " -> " + nw
	}
}

// block renders a value after "path:": inline when short, else a map's
// keys one per line.
func block(v any, pathLen int) string {
	s := Compact(v)
	m, ok := v.(map[string]any)
	if !ok || pathLen+len(s) <= 120 {
		return " " + s
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("\n        " + k + ": " + Compact(m[k]))
	}
	return b.String()
}
