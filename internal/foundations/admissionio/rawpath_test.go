package admissionio

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRawObjectAt(t *testing.T) {
	raw := []byte(`{"a":"}{][\"","spec":{"n":-1.5e3,"t":true,"containers":[{"x":[1,{"y":2}]},{"resources":{"futureField":1},"a~b/c":{}}],"e\u0073c":{}}}`)
	for path, want := range map[string]bool{
		"spec":                           true,
		"spec/containers/1/resources":    true,
		"spec/containers/1/a~b/c":        false, // segments are split on / here; see below
		"spec/containers/0/resources":    false,
		"spec/containers/2":              false,
		"spec/containers/0/x/1":          true,
		"spec/n":                         false,
		"spec/esc":                       true, // an escaped key is unquoted
		"a":                              false,
		"missing":                        false,
		"spec/containers/notanindex/foo": false,
	} {
		segs := strings.Split(path, "/")
		index := make([]bool, len(segs))
		for i, s := range segs {
			_, err := strconv.Atoi(s)
			index[i] = err == nil || (i > 0 && segs[i-1] == "containers")
		}
		assert.Equal(t, want, rawObjectAt(raw, segs, index), path)
	}
	assert.True(t, rawObjectAt(raw, []string{"spec", "containers", "1", "a~b/c"}, []bool{false, false, true, false}))
	assert.False(t, rawObjectAt([]byte(`{"spec":{"a":`), []string{"spec", "b"}, []bool{false, false}), "malformed JSON answers false")
}

func TestRawObjectAtAllocatesNothing(t *testing.T) {
	raw := []byte(`{"spec":{"containers":[{"name":"a","args":["x","y"]},{"resources":{"futureField":1}}]}}`)
	segs, index := []string{"spec", "containers", "1", "resources"}, []bool{false, false, true, false}
	assert.Zero(t, testing.AllocsPerRun(100, func() { rawObjectAt(raw, segs, index) }))
}

// FuzzRawObjectAt compares the scanner with decoding raw and walking the tree.
func FuzzRawObjectAt(f *testing.F) {
	f.Add([]byte(`{"a":{"b":[{"c":{}}]}}`), "a/b/0/c")
	f.Add([]byte(`{"a":"{\"b\":{}}","b":{}}`), "b")
	f.Fuzz(func(t *testing.T, raw []byte, path string) {
		var tree any
		// Invalid UTF-8 is replaced by the decoder, so it has no meaning
		// to compare; the API server only sends valid JSON text.
		if !utf8.Valid(raw) || json.Unmarshal(raw, &tree) != nil {
			return
		}
		segs := strings.Split(path, "/")
		index := make([]bool, len(segs))
		want := true
		node := tree
		for i, s := range segs {
			switch n := node.(type) {
			case map[string]any:
				node = n[s]
			case []any:
				k, err := strconv.Atoi(s)
				index[i] = true
				if err != nil || k < 0 || k >= len(n) || strconv.Itoa(k) != s {
					want = false
				} else {
					node = n[k]
				}
			default:
				want = false
			}
			if !want {
				break
			}
		}
		if _, isObj := node.(map[string]any); !isObj {
			want = false
		}
		if got := rawObjectAt(raw, segs, index); got != want {
			for _, seg := range segs {
				if strings.Count(string(raw), seg) > 1 {
					return // a duplicate key: the decoder keeps the last, the scanner the first
				}
			}
			t.Fatalf("rawObjectAt(%s, %q) = %v, decoding says %v", raw, path, got, want)
		}
	})
}

// TestLabelsAndAnnotationsIsTheRoundTrip: the shortcut gives what the JSON
// round trip gives, and knows every field of ObjectMeta.
func TestLabelsAndAnnotationsIsTheRoundTrip(t *testing.T) {
	assert.Equal(t, 15, reflect.TypeOf(metav1.ObjectMeta{}).NumField(),
		"ObjectMeta changed: teach labelsAndAnnotations its new field (and this count)")
	d := &differ{}
	for _, m := range []metav1.ObjectMeta{
		{},
		{Labels: map[string]string{"a": "b"}},
		{Annotations: map[string]string{"trainguard.io/injected": "prestop"}, Labels: map[string]string{}},
		{Labels: map[string]string{"a": ""}, Annotations: map[string]string{"x": "null"}},
	} {
		fast, ok := labelsAndAnnotations(&m)
		require.True(t, ok)
		b, err := json.Marshal(&m)
		require.NoError(t, err)
		var tree any
		require.NoError(t, json.Unmarshal(b, &tree))
		want, err := json.Marshal(prune(tree))
		require.NoError(t, err)
		got, err := json.Marshal(fast)
		require.NoError(t, err)
		assert.JSONEq(t, string(want), string(got))
		gotClean, err := json.Marshal(d.clean(reflect.ValueOf(&m)))
		require.NoError(t, err)
		assert.JSONEq(t, string(want), string(gotClean))
	}
	for _, m := range []metav1.ObjectMeta{{Name: "n"}, {Finalizers: []string{"f"}}, {Generation: 1}} {
		_, ok := labelsAndAnnotations(&m)
		assert.False(t, ok, "%+v", m)
	}
}
