package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/pflag"
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

// input is the documents of every -f: docs in the order given, and for
// each the name its position is reported under when it has no name of its
// own ("document 3", or "jobs/b.yaml document 3" when several files are read).
type input struct {
	path  string // the files, for messages
	docs  [][]byte
	names []string
}

// docName is the fallback name of document i.
func (in *input) docName(i int) string {
	if i < len(in.names) {
		return in.names[i]
	}
	return fmt.Sprintf("document %d", i+1)
}

// inputFlags are -f and -R, which validate and inject share with kubectl.
type inputFlags struct {
	files     []string
	recursive bool
}

func (f *inputFlags) bind(flags *pflag.FlagSet, what string) {
	flags.StringArrayVarP(&f.files, "filename", "f", nil, what+"; repeat it for several, a directory reads its .yaml, .yml and .json files, - reads stdin (once)")
	flags.BoolVarP(&f.recursive, "recursive", "R", false, "read the directories given with -f recursively")
}

// read reads every document the flags name.
func (f *inputFlags) read(stdin io.Reader) (*input, error) {
	return readInput(f.files, f.recursive, stdin)
}

// manifestExtensions are the files -f DIR reads, as kubectl's.
var manifestExtensions = []string{".yaml", ".yml", ".json"}

// expandPaths turns the -f arguments into files as kubectl does: a
// directory gives its .yaml, .yml and .json files (with recursive, those of
// its subdirectories too), in lexical order; "-" (stdin) at most once.
func expandPaths(paths []string, recursive bool) ([]string, error) {
	var files []string
	stdin := 0
	for _, p := range paths {
		if p == "-" {
			if stdin++; stdin > 1 {
				return nil, errors.New("-f - (stdin) given more than once; stdin can be read only once")
			}
			files = append(files, p)
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", p, err)
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		found, err := manifestsIn(p, recursive)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("directory %s holds no .yaml, .yml or .json files%s", p, map[bool]string{false: " (use -R to read its subdirectories)", true: ""}[recursive])
		}
		files = append(files, found...)
	}
	return files, nil
}

// manifestsIn lists dir's manifest files; subdirectories only when recursive.
func manifestsIn(dir string, recursive bool) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if d.IsDir() {
			if path != dir && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(manifestExtensions, strings.ToLower(filepath.Ext(path))) {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// readInput reads the documents of every -f and refuses an input without
// any object: an empty file (or one of only comments) is almost always a
// mistake in a pipeline (a failed kubectl get, a wrong path), and a CI step
// must not pass on it. Every file given must hold an object.
func readInput(paths []string, recursive bool, stdin io.Reader) (*input, error) {
	if len(paths) == 0 {
		return nil, errors.New("-f FILE is required (use -f - for stdin)")
	}
	files, err := expandPaths(paths, recursive)
	if err != nil {
		return nil, err
	}
	in := &input{path: strings.Join(files, ", ")}
	for _, path := range files {
		docs, err := readDocuments(path, stdin)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(docs, func(d []byte) bool { return !isEmptyDocument(d) }) {
			name := path
			if path == "-" {
				name = "stdin"
			}
			return nil, fmt.Errorf("%s holds no Kubernetes objects (it is empty or only comments); give a file of YAML documents", name)
		}
		for i, doc := range docs {
			name := fmt.Sprintf("document %d", i+1)
			if len(files) > 1 {
				name = path + " " + name
			}
			in.docs = append(in.docs, doc)
			in.names = append(in.names, name)
		}
	}
	return in, nil
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
