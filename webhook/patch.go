package webhook

import (
	"strings"

	sigsjson "sigs.k8s.io/json"
)

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

// decodeObject decodes an admitted object the way the API server reads it:
// field names match case-sensitively. encoding/json would accept "Labels"
// for "labels", and the patch would then point at a member raw lacks.
func decodeObject(raw []byte, into any) error {
	return sigsjson.UnmarshalCaseSensitivePreserveInts(raw, into)
}
