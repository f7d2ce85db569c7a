package chart

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const (
	beginMarker = "<!-- BEGIN tested-commands -->"
	endMarker   = "<!-- END tested-commands -->"
	chartRef    = "charts/trainguard"
)

// readmeCommands returns the shell commands of the code blocks between the
// markers of the chart README, continuation lines joined, comments dropped.
func readmeCommands(t *testing.T, readme string) []string {
	t.Helper()
	begin, end := strings.Index(readme, beginMarker), strings.Index(readme, endMarker)
	require.True(t, begin >= 0 && end > begin, "README.md must hold %q ... %q", beginMarker, endMarker)
	var cmds []string
	inBlock, pending := false, ""
	for _, line := range strings.Split(readme[begin:end], "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock || trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if i := strings.Index(trimmed, " #"); i >= 0 {
			trimmed = strings.TrimSpace(trimmed[:i])
		}
		if strings.HasSuffix(trimmed, "\\") {
			pending += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		cmds = append(cmds, pending+trimmed)
		pending = ""
	}
	require.False(t, inBlock, "unterminated code block between the markers")
	return cmds
}

// helmCommand is a parsed `helm install|upgrade|uninstall`.
type helmCommand struct {
	verb, release, chart, namespace string
	set                             []string
}

func parseHelm(t *testing.T, cmd string) helmCommand {
	t.Helper()
	f := strings.Fields(cmd)
	require.GreaterOrEqual(t, len(f), 3, cmd)
	h := helmCommand{verb: f[1], release: f[2]}
	rest := f[3:]
	if h.verb != "uninstall" {
		require.NotEmpty(t, rest, cmd)
		h.chart, rest = rest[0], rest[1:]
	}
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case "--namespace", "-n":
			require.Less(t, i+1, len(rest), cmd)
			h.namespace = rest[i+1]
			i++
		case "--set":
			require.Less(t, i+1, len(rest), cmd)
			h.set = append(h.set, rest[i+1])
			i++
		case "--create-namespace", "--wait":
		default:
			// Any other flag would change what is installed in a way the
			// test does not render; support it here before using it.
			t.Fatalf("README command uses a flag the test cannot render: %q in %q", rest[i], cmd)
		}
	}
	require.NotEmpty(t, h.namespace, "every README helm command names its namespace: %q", cmd)
	return h
}

func TestReadmeCommandsRenderExactly(t *testing.T) {
	helm, dir := helmAndChart(t)
	cmds := readmeCommands(t, string(chartFile(t, "README.md")))
	require.NotEmpty(t, cmds)

	var installs, upgrades, uninstalls int
	sawSelfManaged, sawAnnotate := false, false
	var release, namespace string
	configNames := map[string]bool{}
	secretNames := map[string]bool{}
	for _, cmd := range cmds {
		t.Run(cmd, func(t *testing.T) {
			f := strings.Fields(cmd)
			switch {
			case f[0] == "helm" && (f[1] == "install" || f[1] == "upgrade"):
				h := parseHelm(t, cmd)
				assert.Equal(t, chartRef, h.chart)
				if release == "" {
					release, namespace = h.release, h.namespace
				}
				assert.Equal(t, release, h.release, "one release throughout, so the kubectl names below stay right")
				assert.Equal(t, namespace, h.namespace)
				require.NoError(t, Lint(helm, dir, h.namespace, h.set...))
				objs, err := Render(helm, dir, h.release, h.namespace, h.set...)
				require.NoError(t, err)
				m, v, err := WebhookConfigurations(objs)
				require.NoError(t, err)
				configNames["mutatingwebhookconfiguration/"+m.Name] = true
				configNames["validatingwebhookconfiguration/"+v.Name] = true
				if slices.Contains(h.set, "certManager.enabled=false") {
					sawSelfManaged = true
					secretNames[deploymentArg(t, objs, "--cert-secret=")] = true
				}
				if f[1] == "install" {
					installs++
				} else {
					upgrades++
				}
			case f[0] == "helm" && f[1] == "uninstall":
				h := parseHelm(t, cmd)
				assert.Equal(t, release, h.release)
				assert.Equal(t, namespace, h.namespace)
				uninstalls++
				assert.Len(t, configNames, 2, "the webhook configurations must be deleted before helm uninstall")
			case f[0] == "kubectl" && f[1] == "delete" && (f[2] == "mutatingwebhookconfiguration" || f[2] == "validatingwebhookconfiguration"):
				require.GreaterOrEqual(t, len(f), 4)
				assert.True(t, configNames[f[2]+"/"+f[3]], "%s %s is not what the README's helm commands render (%v)", f[2], f[3], configNames)
				delete(configNames, f[2]+"/"+f[3])
				configNames["deleted:"+f[2]] = true
			case f[0] == "kubectl" && f[1] == "delete" && f[2] == "secret":
				require.GreaterOrEqual(t, len(f), 4)
				assert.True(t, secretNames[f[3]], "secret %s is not the self-managed certificate Secret (%v)", f[3], secretNames)
				assert.Contains(t, cmd, "--namespace "+namespace)
			case f[0] == "kubectl" && f[1] == "delete" && f[2] == "configmaps":
				assert.Contains(t, cmd, "-l trainguard.io/bad-nodes=true")
			case f[0] == "kubectl" && f[1] == "annotate" && f[2] == "namespace":
				require.Len(t, f, 5)
				assert.Equal(t, "trainguard.io/inject=enabled", f[4], "the opt-in contract (DESIGN.md)")
				sawAnnotate = true
			case f[0] == "kubectl" && f[1] == "get" && f[2] == "namespace":
				assert.Contains(t, cmd, "trainguard.io/inject")
			case f[0] == "kubectl" && f[1] == "label" && f[2] == "namespace":
				assert.Equal(t, "trainguard.io/inject-", f[len(f)-1])
			default:
				t.Fatalf("command between the README markers is not checked by this test: %q", cmd)
			}
		})
	}
	assert.GreaterOrEqual(t, installs, 2, "install with and without cert-manager")
	assert.GreaterOrEqual(t, upgrades, 1)
	assert.Equal(t, 1, uninstalls)
	assert.True(t, sawSelfManaged, "an install without cert-manager")
	assert.True(t, sawAnnotate, "how to opt a namespace in")
}

func deploymentArg(t *testing.T, objs []*unstructured.Unstructured, prefix string) string {
	t.Helper()
	for _, o := range OfKind(objs, "Deployment") {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			for _, a := range c.(map[string]any)["args"].([]any) {
				if s := a.(string); strings.HasPrefix(s, prefix) {
					return strings.TrimPrefix(s, prefix)
				}
			}
		}
	}
	t.Fatalf("no %s argument rendered", prefix)
	return ""
}

// valueKeys flattens values.yaml into the dotted keys the README table must
// document: maps recurse, except the free-form ones documented as a whole.
func valueKeys(prefix string, m map[string]any, out *[]string) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 && key != "resources" {
			valueKeys(key, sub, out)
			continue
		}
		*out = append(*out, key)
	}
}

func TestReadmeValuesTableCoversEveryValue(t *testing.T) {
	var values map[string]any
	require.NoError(t, yaml.Unmarshal(chartFile(t, "values.yaml"), &values))
	var keys []string
	valueKeys("", values, &keys)
	sort.Strings(keys)

	_, table, found := strings.Cut(string(chartFile(t, "README.md")), "\n## Values\n")
	require.True(t, found, "README.md needs a ## Values section")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		documented = append(documented, m[1])
	}
	sort.Strings(documented)
	assert.Equal(t, keys, documented, "the README values table must list exactly the keys of values.yaml")
}
