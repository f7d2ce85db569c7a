package main

import (
	"os"
	"path/filepath"
	"testing"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
)

// FuzzCheckDocument: whatever a document holds, the structural checks and
// the rules answer with lines, never a panic (the seeds are the broken
// inputs of testdata/broken and the golden inputs).
func FuzzCheckDocument(f *testing.F) {
	for _, glob := range []string{"testdata/broken/*", "../../webhook/testdata/*.in.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	c := newChecker(configv1alpha1.Default(), &input{path: "fuzz"})
	f.Fuzz(func(t *testing.T, doc []byte) {
		for _, r := range c.document("document 1", doc) {
			if r.name == "" {
				t.Fatalf("a report without a name for %q", doc)
			}
		}
	})
}
