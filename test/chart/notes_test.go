package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// renderNotes renders the chart's NOTES.txt with the real helm. `helm
// template` skips NOTES.txt and `helm install --dry-run` needs a cluster,
// so the test renders a copy of the chart where the notes are the data of
// a ConfigMap.
func renderNotes(t *testing.T, setValues ...string) string {
	t.Helper()
	helm, err := HelmBin()
	require.NoError(t, err)
	dir, err := Dir()
	require.NoError(t, err)
	copyDir := filepath.Join(t.TempDir(), "trainguard")
	require.NoError(t, os.CopyFS(copyDir, os.DirFS(dir)))
	templates := filepath.Join(copyDir, "templates")
	notes, err := os.ReadFile(filepath.Join(templates, "NOTES.txt"))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(templates, "NOTES.txt")))
	require.NoError(t, os.WriteFile(filepath.Join(templates, "_notes_under_test.tpl"),
		[]byte(`{{- define "notes-under-test" -}}`+"\n"+string(notes)+"\n{{- end }}\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(templates, "notes-under-test.yaml"), []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n{{ include \"notes-under-test\" . | indent 4 }}\n"), 0o600))
	args := []string{"template", "trainguard", copyDir, "--namespace", "trainguard-system", "--kube-version", KubeVersion,
		"--show-only", "templates/notes-under-test.yaml"}
	for _, v := range setValues {
		args = append(args, "--set", v)
	}
	out, err := runHelm(helm, args...)
	require.NoError(t, err)
	objs, err := Decode(out)
	require.NoError(t, err)
	require.Len(t, objs, 1)
	text, _, _ := unstructured.NestedString(objs[0].Object, "data", "notes")
	return text
}

// TestNotesWarnWhenTheWebhookPortIsOpenToEveryPod: with
// networkPolicy.webhookFrom empty (the default) any pod can open
// connections to the webhook port, and many pods together can lock
// admission out; the notes say so loudly, and stop once the port is
// narrowed to the API server.
func TestNotesWarnWhenTheWebhookPortIsOpenToEveryPod(t *testing.T) {
	open := renderNotes(t)
	assert.Contains(t, open, "WARNING: the webhook port is open to every pod")
	assert.Contains(t, strings.Join(strings.Fields(open), " "), "many pods together can still lock admission out")
	assert.Contains(t, open, "networkPolicy.webhookFrom")
	narrowed := renderNotes(t, "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.10/32")
	assert.NotContains(t, narrowed, "WARNING: the webhook port")
	off := renderNotes(t, "networkPolicy.enabled=false")
	assert.Contains(t, off, "WARNING: networkPolicy.enabled=false")
}
