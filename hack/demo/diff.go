package main

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// change is one difference between the object as the API server alone
// would store it and as stored after trainguard's webhook.
type change struct {
	op   byte   // '+' added, '-' removed, '~' changed
	path string // e.g. spec.containers[pytorch].ports[taskd-port]
	old  any
	new  any
}

// diffObjects compares two objects, ignoring what the API server sets on
// every create (uid, resourceVersion, timestamps, managedFields, status)
// and the opt-out annotation that made the baseline.
func diffObjects(before, after *unstructured.Unstructured) []change {
	b, a := clean(before, true), clean(after, false)
	var out []change
	diffValue(b, a, "", &out)
	return out
}

func clean(u *unstructured.Unstructured, baseline bool) map[string]any {
	o := u.DeepCopy().Object
	delete(o, "status")
	if md, ok := o["metadata"].(map[string]any); ok {
		for _, k := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"} {
			delete(md, k)
		}
		if ann, ok := md["annotations"].(map[string]any); ok && baseline {
			delete(ann, contract.AnnotationInject)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
	}
	return o
}

func diffValue(b, a any, path string, out *[]change) {
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
		*out = append(*out, change{op: '+', path: path, new: a})
		return
	case a == nil:
		*out = append(*out, change{op: '-', path: path, old: b})
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
		*out = append(*out, change{op: '~', path: path, old: b, new: a})
	}
}

func diffMap(b, a map[string]any, path string, out *[]change) {
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
func diffList(b, a []any, path string, out *[]change) {
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
		*out = append(*out, change{op: '+', path: p, new: withoutName(m)})
	}
	for _, e := range b {
		if name := e.(map[string]any)["name"].(string); !seen[name] {
			*out = append(*out, change{op: '-', path: path + "[" + name + "]", old: withoutName(e.(map[string]any))})
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

// compact renders a value on one line, YAML flow style.
func compact(v any) string {
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
			parts = append(parts, k+": "+compact(t[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, 0, len(t))
		for _, e := range t {
			parts = append(parts, compact(e))
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
