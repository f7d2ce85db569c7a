package webhook

import "strings"

var pointerEncoder = strings.NewReplacer("~", "~0", "/", "~1")

func joinPointer(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		if strings.ContainsAny(s, "~/") {
			s = pointerEncoder.Replace(s)
		}
		b.WriteString(s)
	}
	return b.String()
}
