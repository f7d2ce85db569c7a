package jobs

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/testing/ruletable"
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
			ruletable.Expect(t, res.Errors, res.Warnings, tc.errs, tc.warn, tc.noWarn)
		})
	}
}
