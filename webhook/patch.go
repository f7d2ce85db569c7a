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

// decodeObject decodes an admitted object (see objectJSON).
func decodeObject(raw []byte, into any) error {
	return objectJSON.Unmarshal(raw, into)
}
