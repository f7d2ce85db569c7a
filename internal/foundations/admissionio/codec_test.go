package admissionio_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
)

// EncodePatch must say what json.Marshal(ops) says, for every kind of
// operation and every path a tenant's keys can produce.
func TestEncodePatchMatchesOperationMarshalJSON(t *testing.T) {
	ops := []jsonpatch.Operation{
		{Operation: "add", Path: "/metadata/labels", Value: map[string]string{"a": "<b>&"}},
		{Operation: "add", Path: "/metadata/annotations/trainguard.io~1injected", Value: "preStop,taskd"},
		{Operation: "add", Path: "/spec/x", Value: nil},
		{Operation: "replace", Path: "/spec/containers/0/args/1", Value: nil},
		{Operation: "remove", Path: "/spec/containers/0/args/2"},
		{Operation: "add", Path: "/spec/containers/0/resources/limits", Value: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
		{Operation: "add", Path: "/metadata/annotations/\u00e9\"\\<>&\x01\u2028", Value: 3},
		{Operation: "test", Path: "/a", Value: false},
	}
	for i := range ops {
		assertSameEncoding(t, ops[:i+1])
	}
	assertSameEncoding(t, nil)
}

func assertSameEncoding(t *testing.T, ops []jsonpatch.Operation) {
	t.Helper()
	want, err := json.Marshal(ops)
	require.NoError(t, err)
	got, err := admissionio.EncodePatch(ops)
	require.NoError(t, err)
	if len(ops) == 0 {
		want = []byte("[]")
	}
	assert.JSONEq(t, string(want), string(got))
}

func TestEncodePatchRefusesAnUnencodableValue(t *testing.T) {
	_, err := admissionio.EncodePatch([]jsonpatch.Operation{{Operation: "add", Path: "/a", Value: make(chan int)}})
	require.ErrorContains(t, err, "encoding patch: /a")
}

// FuzzEncodePatch compares EncodePatch with json.Marshal on arbitrary
// paths and string values.
func FuzzEncodePatch(f *testing.F) {
	f.Add("add", "/metadata/annotations/a~1b", "v")
	f.Add("remove", "/x/\u2028<", "")
	f.Fuzz(func(t *testing.T, op, path, value string) {
		ops := []jsonpatch.Operation{{Operation: op, Path: path, Value: value}, {Operation: op, Path: path}}
		want, err := json.Marshal(ops)
		require.NoError(t, err)
		got, err := admissionio.EncodePatch(ops)
		require.NoError(t, err)
		var a, b any
		require.NoError(t, json.Unmarshal(want, &a))
		require.NoError(t, json.Unmarshal(got, &b), "%s", got)
		assert.Equal(t, a, b)
	})
}
