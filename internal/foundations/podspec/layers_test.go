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

	"github.com/trainguard/trainguard/internal/testing/repo"
)

// No controller imports the injections or the admission server: what they
// share with them (pod-spec helpers, the node anti-affinity, NodeAvoider)
// lives here, below both.
func TestNoControllerImportsMutatorsOrTheWebhook(t *testing.T) {
	const module = "github.com/trainguard/trainguard/"
	root := moduleRoot(t)
	for _, dir := range []string{"internal/controllers/rescheduler", "internal/controllers/outcome", "internal/controllers/optin", "internal/controllers/ownerchain", "internal/foundations/podspec"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
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

// moduleRoot is the directory of trainguard's go.mod, wherever this package lives.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	require.NoError(t, err)
	return root
}
