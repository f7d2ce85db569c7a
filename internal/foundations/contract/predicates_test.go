package contract

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The namespace label follows the opt-in annotation, and only its two valid
// values: a bad value is refused by the validating webhook, not copied
// into the label the webhook namespaceSelectors match.
func TestMirrorInjectLabel(t *testing.T) {
	for _, tc := range []struct {
		name              string
		annotation, label *string
		want              *string
		changed           bool
	}{
		{name: "enabled, no label", annotation: ptr.To(InjectEnabled), want: ptr.To(InjectEnabled), changed: true},
		{name: "disabled over enabled", annotation: ptr.To(InjectDisabled), label: ptr.To(InjectEnabled), want: ptr.To(InjectDisabled), changed: true},
		{name: "in step", annotation: ptr.To(InjectEnabled), label: ptr.To(InjectEnabled), want: ptr.To(InjectEnabled)},
		{name: "annotation removed", label: ptr.To(InjectEnabled), changed: true},
		{name: "bad value is not spread", annotation: ptr.To("yes"), label: ptr.To(InjectEnabled), changed: true},
		{name: "nothing", changed: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta := metav1.ObjectMeta{}
			if tc.annotation != nil {
				meta.Annotations = map[string]string{AnnotationInject: *tc.annotation}
			}
			if tc.label != nil {
				meta.Labels = map[string]string{LabelInjectEnabled: *tc.label}
			}
			assert.Equal(t, tc.changed, MirrorInjectLabel(&meta))
			got, has := meta.Labels[LabelInjectEnabled]
			if tc.want == nil {
				assert.False(t, has, "label must be absent, is %q", got)
			} else {
				assert.Equal(t, *tc.want, got)
			}
			assert.False(t, MirrorInjectLabel(&meta), "mirroring twice changes nothing")
		})
	}
}
