package admissionio

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"gomodules.xyz/jsonpatch/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TypedDiff returns the JSON-patch operations that apply to the user's raw
// object the changes between before and after: the same typed object
// before and after the mutators ran. It walks the two values with
// reflection, so it allocates only for what changed, and it only ever
// touches fields the Go types declare: fields they do not know are never
// mentioned, so they survive on the API server untouched.
//
// Whether a parent exists in the raw object is read off before: a nil
// pointer, map or slice is absent from raw (typed nil-ness mirrors raw
// presence), so the change is written as one "add" of the whole parent. A
// zero struct is ambiguous: it is absent from raw, or present holding only
// fields the Go types do not declare (resources: {futureField: …}). Only
// then is raw itself consulted, so the unknown fields are kept. Object
// members are always written with "add", which JSON Patch defines as
// set-or-replace.
func TypedDiff(types *TypeCache, raw []byte, before, after any) ([]jsonpatch.Operation, error) {
	d := &differ{segs: make([]string, 0, 16), index: make([]bool, 0, 16), types: types, raw: raw}
	d.value(reflect.ValueOf(before), reflect.ValueOf(after))
	if d.err != nil {
		return nil, d.err
	}
	return d.ops, nil
}

type differ struct {
	types *TypeCache
	raw   []byte
	segs  []string
	// index[i] is set when segs[i] is an array index.
	index []bool
	// inSlice is set while the last segment is an array index, where JSON
	// Patch's "add" would insert: a changed element must be replaced.
	inSlice bool
	ops     []jsonpatch.Operation
	err     error
}

// setOp is the operation that sets the member at the current path.
func (d *differ) setOp() string {
	if d.inSlice {
		return "replace"
	}
	return "add"
}

var (
	marshalerType  = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	objectMetaType = reflect.TypeOf(metav1.ObjectMeta{})
)

func (d *differ) value(a, b reflect.Value) {
	if d.err != nil {
		return
	}
	info := d.types.of(a.Type())
	if info.marshaler {
		d.leaf(a, b)
		return
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			d.whole(a, b)
			return
		}
		if a.Elem().Type() != b.Elem().Type() {
			d.leaf(a, b)
			return
		}
		d.value(a.Elem(), b.Elem())
	case reflect.Struct:
		d.structFields(info, a, b)
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			d.whole(a, b)
			return
		}
		d.mapEntries(a, b)
	case reflect.Slice:
		if a.IsNil() || b.IsNil() {
			d.whole(a, b)
			return
		}
		d.sliceElems(a, b)
	default:
		d.leaf(a, b)
	}
}

// whole handles a parent that may be missing in raw: add it entirely.
func (d *differ) whole(a, b reflect.Value) {
	if a.IsNil() && b.IsNil() {
		return
	}
	if b.IsNil() {
		// a was set, so raw has the member (typed nil-ness mirrors raw presence).
		d.emit("remove", nil)
		return
	}
	if reflect.DeepEqual(boxed(a), boxed(b)) {
		return
	}
	d.emit(d.setOp(), d.clean(b))
}

func (d *differ) leaf(a, b reflect.Value) {
	if equalLeaf(a, b) {
		return
	}
	d.emit(d.setOp(), boxed(b))
}

// equalLeaf compares scalars without boxing them (boxing every field of a
// pod was most of the webhook's allocations), and marshalling types such as
// resource.Quantity by their JSON form.
func equalLeaf(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	}
	if reflect.DeepEqual(boxed(a), boxed(b)) {
		return true
	}
	ja, errA := json.Marshal(boxed(a))
	jb, errB := json.Marshal(boxed(b))
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// boxed returns v as an interface, by pointer when addressable so large
// structs are not copied.
func boxed(v reflect.Value) any {
	if v.Kind() == reflect.Struct && v.CanAddr() {
		return v.Addr().Interface()
	}
	return v.Interface()
}

func (d *differ) structFields(info *typeInfo, a, b reflect.Value) {
	for _, f := range info.fields {
		fa, fb := a.Field(f.index), b.Field(f.index)
		d.inSlice = false
		if f.inline {
			d.value(fa, fb)
			continue
		}
		d.push(f.name, false)
		if f.plainStruct && fa.IsZero() && !fb.IsZero() && !d.rawHasObject() {
			// Absent from raw: write it whole.
			d.emit("add", d.clean(fb))
		} else {
			d.value(fa, fb)
		}
		d.pop()
	}
}

func (d *differ) mapEntries(a, b reflect.Value) {
	if a.Type().Key().Kind() != reflect.String {
		// JSON object keys are strings; a Go type with other keys would
		// need its own encoding, which the differ does not guess.
		d.fail(fmt.Errorf("%s: map key type %s is not a string", JoinPointer(d.segs), a.Type().Key()))
		return
	}
	iter := b.MapRange()
	for iter.Next() {
		k := iter.Key()
		d.inSlice = false
		d.push(k.String(), false)
		av := a.MapIndex(k)
		if !av.IsValid() {
			d.emit("add", d.clean(iter.Value()))
		} else {
			d.value(av, iter.Value())
		}
		d.pop()
	}
	iter = a.MapRange()
	for iter.Next() {
		if !b.MapIndex(iter.Key()).IsValid() {
			d.push(iter.Key().String(), false)
			d.emit("remove", nil)
			d.pop()
		}
	}
}

func (d *differ) sliceElems(a, b reflect.Value) {
	n := min(a.Len(), b.Len())
	for i := 0; i < n; i++ {
		d.push(strconv.Itoa(i), true)
		d.inSlice = true
		d.value(a.Index(i), b.Index(i))
		d.pop()
	}
	// Removals from the end first, so earlier indices stay valid.
	for i := a.Len() - 1; i >= n; i-- {
		d.push(strconv.Itoa(i), true)
		d.emit("remove", nil)
		d.pop()
	}
	for i := n; i < b.Len(); i++ {
		d.inSlice = false
		d.push("-", false)
		d.emit("add", d.clean(b.Index(i)))
		d.pop()
	}
}

func (d *differ) push(seg string, index bool) {
	d.segs = append(d.segs, seg)
	d.index = append(d.index, index)
}

func (d *differ) pop() {
	d.segs = d.segs[:len(d.segs)-1]
	d.index = d.index[:len(d.index)-1]
}

func (d *differ) emit(op string, value any) {
	d.ops = append(d.ops, jsonpatch.Operation{Operation: op, Path: JoinPointer(d.segs), Value: value})
}

// fail records the first error; the walk stops at the next value.
func (d *differ) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// rawHasObject reports whether raw holds a JSON object at the current
// path. It runs only when a zero struct changed, and scans raw without
// decoding it (rawObjectAt).
func (d *differ) rawHasObject() bool { return rawObjectAt(d.raw, d.segs, d.index) }

// jsonName returns a struct field's JSON name and whether it is inlined.
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" && (opts == "inline" || f.Anonymous) {
		return "", true
	}
	if name == "" {
		return f.Name, false
	}
	return name, false
}

// clean returns the value to put in a patch. ObjectMeta is the one type
// whose JSON form carries a null for an empty field (creationTimestamp);
// it goes through a JSON tree without nulls so a patch adds only what
// trainguard set. Everything else is marshalled as it is.
func (d *differ) clean(v reflect.Value) any {
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Type() != objectMetaType {
		return boxed(v)
	}
	if m, ok := labelsAndAnnotations(boxed(v).(*metav1.ObjectMeta)); ok {
		return m
	}
	b, err := json.Marshal(boxed(v))
	if err != nil {
		d.fail(fmt.Errorf("%s: encoding metadata: %w", JoinPointer(d.segs), err))
		return nil
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		d.fail(fmt.Errorf("%s: re-reading metadata: %w", JoinPointer(d.segs), err))
		return nil
	}
	return prune(tree)
}

// labelsAndAnnotations is clean's answer without the JSON round trip for
// the metadata trainguard adds to a template that had none: only labels
// and annotations (what omitempty keeps of them), nothing else set. ok is
// false for any other metadata. TestLabelsAndAnnotationsIsTheRoundTrip
// fails when ObjectMeta gains a field this does not know.
func labelsAndAnnotations(m *metav1.ObjectMeta) (map[string]any, bool) {
	//nolint:staticcheck // SelfLink is deprecated but still a field a tenant can set, so it must go through the round trip.
	if m.Name != "" || m.GenerateName != "" || m.Namespace != "" || m.SelfLink != "" || m.UID != "" || m.ResourceVersion != "" ||
		m.Generation != 0 || !m.CreationTimestamp.IsZero() || m.DeletionTimestamp != nil || m.DeletionGracePeriodSeconds != nil ||
		len(m.OwnerReferences) != 0 || len(m.Finalizers) != 0 || len(m.ManagedFields) != 0 {
		return nil, false
	}
	out := make(map[string]any, 2)
	if len(m.Labels) > 0 {
		out["labels"] = m.Labels
	}
	if len(m.Annotations) > 0 {
		out["annotations"] = m.Annotations
	}
	return out, true
}

func prune(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			t[k] = prune(e)
		}
	case []any:
		for i := range t {
			t[i] = prune(t[i])
		}
	}
	return v
}

// TypeCache remembers, per Go type, what the differ needs to know about it,
// so the per-request walk does no tag parsing or interface checks. One
// lives in each webhook Injector; it only grows, bounded by the types trainguard
// decodes.
type TypeCache struct {
	m sync.Map // reflect.Type → *typeInfo
}

type typeInfo struct {
	// marshaler types (Quantity, Time, IntOrString) are compared as leaves.
	marshaler bool
	fields    []fieldInfo
}

type fieldInfo struct {
	index  int
	name   string
	inline bool
	// plainStruct: a non-pointer struct field without its own JSON form,
	// which may be absent from raw when zero.
	plainStruct bool
}

func (c *TypeCache) of(t reflect.Type) *typeInfo {
	if v, ok := c.m.Load(t); ok {
		return v.(*typeInfo)
	}
	info := &typeInfo{marshaler: t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType)}
	if t.Kind() == reflect.Struct && !info.marshaler {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, inline := jsonName(f)
			if name == "-" {
				continue
			}
			plain := f.Type.Kind() == reflect.Struct && !f.Type.Implements(marshalerType) && !reflect.PointerTo(f.Type).Implements(marshalerType)
			info.fields = append(info.fields, fieldInfo{index: i, name: name, inline: inline, plainStruct: plain})
		}
	}
	v, _ := c.m.LoadOrStore(t, info)
	return v.(*typeInfo)
}
