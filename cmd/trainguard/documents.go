package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/jobs"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// maxDocumentBytes bounds one YAML document, matching what the API server accepts.
const maxDocumentBytes = 3 * 1024 * 1024

// readDocuments reads every YAML document from path ("-" is stdin). Empty
// documents (e.g. a leading ---) are kept so positions stay meaningful, but
// callers skip them.
func readDocuments(path string, stdin io.Reader) ([][]byte, error) {
	var r io.Reader
	if path == "-" {
		r = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}
		defer f.Close() //nolint:errcheck // read-only file: a close error loses nothing
		r = f
	}
	buffered := bufio.NewReaderSize(r, 64*1024)
	if err := refuseBinary(path, buffered); err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(buffered)
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if len(doc) > maxDocumentBytes {
			return nil, fmt.Errorf("reading %s: document %d is larger than %d bytes", path, len(docs)+1, maxDocumentBytes)
		}
		docs = append(docs, doc)
	}
}

// isEmptyDocument reports whether a YAML document holds only whitespace, comments or separators.
func isEmptyDocument(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' || bytes.Equal(line, []byte("---")) {
			continue
		}
		return false
	}
	return true
}

// input is the documents of one -f FILE.
type input struct {
	path string
	docs [][]byte
}

// readInput reads path's documents and refuses an input without any
// object: an empty file (or one of only comments) is almost always a
// mistake in a pipeline (a failed kubectl get, a wrong path), and a CI step
// must not pass on it.
func readInput(path string, stdin io.Reader) (*input, error) {
	docs, err := readDocuments(path, stdin)
	if err != nil {
		return nil, err
	}
	for _, doc := range docs {
		if !isEmptyDocument(doc) {
			return &input{path: path, docs: docs}, nil
		}
	}
	name := path
	if path == "-" {
		name = "stdin"
	}
	return nil, fmt.Errorf("%s holds no Kubernetes objects (it is empty or only comments); give a file of YAML documents", name)
}

// refuseBinary looks at the start of the input: a NUL byte or bytes that
// are not UTF-8 mean a binary file (an image, an archive, the trainguard
// binary itself), which the YAML reader would report as a confusing
// separator error.
func refuseBinary(path string, r *bufio.Reader) error {
	head, _ := r.Peek(8192)
	if i := bytes.IndexByte(head, 0); i >= 0 {
		return fmt.Errorf("reading %s: not YAML: the input is binary (a NUL byte at offset %d)", path, i)
	}
	for i := 0; i < len(head); {
		ru, size := utf8.DecodeRune(head[i:])
		if ru == utf8.RuneError && size <= 1 && len(head)-i >= utf8.UTFMax {
			return fmt.Errorf("reading %s: not YAML: the input is binary (a byte that is not UTF-8 at offset %d)", path, i)
		}
		i += max(size, 1)
	}
	return nil
}

// namespacesIn returns the annotations of every Namespace in docs (and in
// Lists), so that `validate` and `inject` answer alike for the objects in
// them, wherever the Namespace appears in the input.
func namespacesIn(docs [][]byte) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, doc := range docs {
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			continue
		}
		items := []json.RawMessage{raw}
		var h jobs.Header
		if json.Unmarshal(raw, &h) == nil && h.IsList() {
			items, _ = jobs.ListItems(raw)
		}
		for _, item := range items {
			var h jobs.Header
			if json.Unmarshal(item, &h) == nil && h.APIVersion == "v1" && h.Kind == "Namespace" && h.Metadata.Name != "" {
				out[h.Metadata.Name] = h.Metadata.Annotations
			}
		}
	}
	return out
}
