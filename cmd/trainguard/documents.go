package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

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
	reader := utilyaml.NewYAMLReader(bufio.NewReaderSize(r, 64*1024))
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
