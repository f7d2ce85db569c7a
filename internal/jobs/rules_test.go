package jobs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fixture is a builder's object (internal/testing/builders): its kind and
// its JSON, as admission receives it.
type fixture interface {
	GVK() schema.GroupVersionKind
	JSON() []byte
}

// ruleCase is one row of a kind's rule table: the object, the exact field
// paths of the errors its adapter's Validate must produce (none for a valid
// object), and optionally a warning that must (or must not) be returned.
type ruleCase struct {
	name   string
	obj    fixture
	errs   []string
	warn   string
	noWarn string
}

// runRuleCases decodes each object with its kind's adapter and runs the
// kind's own rules, as the validators do before their cross-field checks.
func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := Builtin().For(tc.obj.GVK())
			require.True(t, ok, "no adapter for %s", String(tc.obj.GVK()))
			require.NotNil(t, a.Validate, "%s has no rules of its own", a.Name)
			job, err := a.Decode(tc.obj.JSON())
			require.NoError(t, err)
			res := a.Validate(job, RuleEnv{})
			got := []string{}
			for _, e := range res.Errors {
				got = append(got, e.Field)
			}
			want := tc.errs
			if want == nil {
				want = []string{}
			}
			assert.Equal(t, want, got, "errors: %v", res.Errors)
			joined := strings.Join(res.Warnings, "\n")
			if tc.warn != "" {
				assert.Contains(t, joined, tc.warn)
			}
			if tc.noWarn != "" {
				assert.NotContains(t, joined, tc.noWarn)
			}
		})
	}
}
