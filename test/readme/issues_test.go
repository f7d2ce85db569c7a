package readme

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// issueNumber finds a citation of the project's issue tracker by number.
// The tracker is not in the repository: a reader of a comment or a doc
// cannot follow it, so the text says the incident or the requirement, or
// names the test or the doc section that holds it. Another project's
// issue (owner/repo#N) is a reference a reader can follow.
var issueNumber = regexp.MustCompile(`(?i)\bissues?(?:\s|//|#)+\d+`)

// TestNoFileCitesAnIssueNumber: code, scripts, chart templates and docs
// name no issue. docs/history and CHANGELOG.md record the past and may.
func TestNoFileCitesAnIssueNumber(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == "docs/history", rel == "bin", d.Name() == ".git", d.Name() == "node_modules", d.Name() == "__pycache__", d.Name() == ".venv":
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "CHANGELOG.md" || !d.Type().IsRegular() {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !hygieneChecked(d.Name(), raw) {
			return nil
		}
		checked++
		// The whole file at once: a comment may wrap between the word and
		// its number.
		for _, at := range issueNumber.FindAllIndex(raw, -1) {
			line := 1 + bytes.Count(raw[:at[0]], []byte("\n"))
			m := strings.Join(strings.Fields(string(raw[at[0]:at[1]])), " ")
			t.Errorf("%s:%d cites %q; say the incident or the requirement, or name the test or doc section that holds it", rel, line, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d files checked under %s; the walk is missing the repository", checked, root)
	}
}

// hygieneChecked says whether a file is one a reader reads as the
// project's current text: Go, Python, shell (by suffix or shebang), chart
// templates, YAML, Markdown, Makefile and Dockerfile.
func hygieneChecked(name string, raw []byte) bool {
	switch filepath.Ext(name) {
	case ".go", ".py", ".sh", ".tpl", ".yaml", ".yml", ".md":
		return true
	case "":
		return name == "Makefile" || name == "Dockerfile" || bytes.HasPrefix(raw, []byte("#!"))
	}
	return false
}
