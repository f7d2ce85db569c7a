package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// branchName finds a doc speaking of a git branch by name ("branch
// issue-16", "on this branch", a heading's "(main, date)"): branches are
// gone once merged, and a reader of the released docs has none of them.
var branchName = regexp.MustCompile(`(?i)\bissue-\d+\b|\b(on|in) this branch\b|\bbranch [a-z0-9][\w./-]*[,)]|\(main, |\bown branch\b`)

// TestNoDocNamesABranch: the docs describe the project as it is, not the
// branch a change was written on.
func TestNoDocNamesABranch(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range markdownFiles(t, root) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// A link's anchor repeats a heading, which names no branch.
		text := mdLink.ReplaceAllString(string(raw), "]")
		for _, m := range branchName.FindAllString(text, -1) {
			rel, _ := filepath.Rel(root, file)
			t.Errorf("%s names a branch: %q; say what the code does now", rel, m)
		}
	}
}
