package admissionio

import "strings"

// JoinPointer builds a JSON pointer (RFC 6901) from path segments, escaping
// "~" and "/" (annotation keys such as trainguard.io/injected contain one).
func JoinPointer(segs []string) string {
	n := len(segs)
	for _, s := range segs {
		n += len(s)
	}
	var b strings.Builder
	// One allocation for the common case (no escapes): the differ builds
	// one pointer per patch operation.
	b.Grow(n)
	for _, s := range segs {
		b.WriteByte('/')
		if strings.ContainsAny(s, "~/") {
			s = strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
		}
		b.WriteString(s)
	}
	return b.String()
}
