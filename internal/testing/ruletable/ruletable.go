// Package ruletable judges one row of a rule table the same way for a
// kind's own rules (internal/jobs) and for the validators that run them
// with their cross-field checks.
package ruletable

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Expect asserts that errs are at exactly the field paths want, in order
// (none for a valid object), and that warnings contain warn and not
// noWarn; an empty warn or noWarn is not checked.
func Expect(t testing.TB, errs field.ErrorList, warnings []string, want []string, warn, noWarn string) {
	t.Helper()
	got := []string{}
	for _, e := range errs {
		got = append(got, e.Field)
	}
	if want == nil {
		want = []string{}
	}
	assert.Equal(t, want, got, "errors: %v", errs)
	joined := strings.Join(warnings, "\n")
	if warn != "" {
		assert.Contains(t, joined, warn)
	}
	if noWarn != "" {
		assert.NotContains(t, joined, noWarn)
	}
}
