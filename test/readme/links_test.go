package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a Markdown inline link or image: [text](target) or ![alt](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

var heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)

var fence = regexp.MustCompile("(?s)```.*?```")

// codeSpan is inline code, whose brackets are not links.
var codeSpan = regexp.MustCompile("`[^`\n]*`")

// TestMarkdownLinksResolve: every relative link in the project's Markdown
// names a file that exists and, with a #fragment, a heading in it (GitHub's
// anchors). External links are not fetched.
func TestMarkdownLinksResolve(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := markdownFiles(t, root)
	if len(files) < 10 {
		t.Fatalf("found only %d Markdown files under %s", len(files), root)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := codeSpan.ReplaceAllString(fence.ReplaceAllString(string(raw), ""), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			if msg := checkLink(root, file, m[1]); msg != "" {
				rel, _ := filepath.Rel(root, file)
				t.Errorf("%s: link %q: %s", rel, m[1], msg)
			}
		}
	}
}

func markdownFiles(t *testing.T, root string) []string {
	var out []string
	for _, pattern := range []string{"*.md", "docs/*.md", "docs/history/*.md", "charts/*/README.md", "sdk/python/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

func checkLink(root, from, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	dest := from
	if path != "" {
		if strings.HasPrefix(path, "/") {
			dest = filepath.Join(root, path)
		} else {
			dest = filepath.Join(filepath.Dir(from), path)
		}
		if _, err := os.Stat(dest); err != nil {
			return "no such file"
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	raw, err := os.ReadFile(dest)
	if err != nil {
		return err.Error()
	}
	for _, h := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(raw), ""), -1) {
		if slug(h[1]) == frag {
			return ""
		}
	}
	return "no heading with anchor #" + frag + " in " + filepath.Base(dest)
}

// slug is GitHub's heading anchor: lower case, punctuation dropped (but
// hyphens and underscores), spaces to hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
