package podspec

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// No controller imports the injections or the admission server: what they
// share with them (pod-spec helpers, the node anti-affinity, NodeAvoider)
// lives here, below both.
func TestNoControllerImportsMutatorsOrTheWebhook(t *testing.T) {
	const module = "github.com/trainguard/trainguard/"
	for _, dir := range []string{"../rescheduler", "../outcome", "../optin", "."} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, above := range []string{module + "mutators", module + "webhook", module + "validators"} {
					assert.NotEqual(t, above, path, "%s imports %s", f, path)
				}
			}
		}
	}
}
