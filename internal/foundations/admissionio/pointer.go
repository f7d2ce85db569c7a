package admissionio

import "strings"

// JoinPointer builds a JSON pointer (RFC 6901) from path segments, escaping
// "~" and "/" (annotation keys such as trainguard.io/injected contain one).
func JoinPointer(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		if strings.ContainsAny(s, "~/") {
			s = strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
		}
		b.WriteString(s)
	}
	return b.String()
}
