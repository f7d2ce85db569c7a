package webhook

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/version"
	"github.com/trainguard/trainguard/internal/jobs"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml from the current mutators")

// goldenCases lists every testdata/<case>.in.yaml.
func goldenCases(t *testing.T) []string {
	t.Helper()
	ins, err := filepath.Glob("testdata/*.in.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ins), 14, "the golden suite must keep at least 14 cases")
	var cases []string
	for _, in := range ins {
		cases = append(cases, strings.TrimSuffix(filepath.Base(in), ".in.yaml"))
	}
	return cases
}

func goldenConfig(t *testing.T) *configv1alpha1.Configuration {
	t.Helper()
	cfg, _, err := config.Load("testdata/config.yaml")
	require.NoError(t, err)
	return cfg
}

// runOffline mutates every document of a YAML stream the way `trainguard inject` does.
func runOffline(t *testing.T, cfg *configv1alpha1.Configuration, in []byte) ([]byte, []string) {
	t.Helper()
	off := NewOffline(cfg)
	var out bytes.Buffer
	var warnings []string
	for i, doc := range splitDocs(t, in) {
		mutated, ws, err := off.InjectDocument(context.Background(), doc)
		require.NoError(t, err)
		warnings = append(warnings, ws...)
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(mutated)
	}
	return out.Bytes(), warnings
}

func splitDocs(t testing.TB, in []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(in)))
	var docs [][]byte
	for {
		d, err := r.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// TestGolden checks testdata/<case>.in.yaml → <case>.out.yaml (plus the
// warnings, in <case>.warnings.txt) through both paths that mutate, like
// Istio's injector tests: offline (`trainguard inject`) and the HTTP
// admission endpoint, one AdmissionReview per object, its JSON patch
// applied as the API server would. `make golden` (-update) rewrites the
// files from the offline path; the HTTP path must then agree with them.
func TestGolden(t *testing.T) {
	cfg := goldenConfig(t)
	for _, name := range goldenCases(t) {
		in, err := os.ReadFile(filepath.Join("testdata", name+".in.yaml"))
		require.NoError(t, err)
		outPath := filepath.Join("testdata", name+".out.yaml")
		warnPath := filepath.Join("testdata", name+".warnings.txt")
		t.Run(name+"/offline", func(t *testing.T) {
			got, warnings := runOffline(t, cfg, in)
			if *update {
				writeGolden(t, outPath, warnPath, got, warnings)
				return
			}
			assertGolden(t, outPath, warnPath, got, warnings)
		})
		t.Run(name+"/http", func(t *testing.T) {
			got, warnings := runHTTP(t, cfg, in)
			assertGolden(t, outPath, warnPath, got, warnings)
		})
	}
}

// TestNoOrphanGoldenFiles fails on an output whose input was removed: a
// stale golden file must not linger looking like a tested case.
func TestNoOrphanGoldenFiles(t *testing.T) {
	outs, err := filepath.Glob("testdata/*.out.yaml")
	require.NoError(t, err)
	warns, err := filepath.Glob("testdata/*.warnings.txt")
	require.NoError(t, err)
	for _, f := range append(outs, warns...) {
		base := strings.TrimSuffix(strings.TrimSuffix(f, ".out.yaml"), ".warnings.txt")
		_, err := os.Stat(base + ".in.yaml")
		assert.NoError(t, err, "%s has no input; delete it or restore %s.in.yaml", f, base)
	}
}

func writeGolden(t *testing.T, outPath, warnPath string, got []byte, warnings []string) {
	t.Helper()
	require.NoError(t, os.WriteFile(outPath, got, 0o644))
	if len(warnings) > 0 {
		require.NoError(t, os.WriteFile(warnPath, []byte(strings.Join(warnings, "\n")+"\n"), 0o644))
	} else if err := os.Remove(warnPath); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

func assertGolden(t *testing.T, outPath, warnPath string, got []byte, warnings []string) {
	t.Helper()
	want, err := os.ReadFile(outPath)
	require.NoError(t, err, "missing golden file; run: make golden")
	assert.Equal(t, string(want), string(got), "stale golden file %s; run: make golden", outPath)
	wantWarnings, err := os.ReadFile(warnPath)
	if os.IsNotExist(err) {
		wantWarnings = nil
	} else {
		require.NoError(t, err)
	}
	assert.Equal(t, strings.TrimSpace(string(wantWarnings)), strings.Join(warnings, "\n"), "stale warnings file %s; run: make golden", warnPath)
}

// TestGoldenOutputsAreIdempotent re-runs the injector on every golden output
// (as a reinvocation would) and requires an empty patch.
func TestGoldenOutputsAreIdempotent(t *testing.T) {
	cfg := goldenConfig(t)
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			out, err := os.ReadFile(filepath.Join("testdata", name+".out.yaml"))
			require.NoError(t, err)
			off := NewOffline(cfg)
			for _, doc := range splitDocs(t, out) {
				raw, err := yaml.YAMLToJSON(doc)
				require.NoError(t, err)
				var h jobs.Header
				require.NoError(t, yaml.Unmarshal(doc, &h))
				// Feed namespaces through the same offline path so overrides apply.
				if _, _, err := off.InjectDocument(context.Background(), doc); err != nil {
					t.Fatal(err)
				}
				if _, ok := jobs.Builtin().For(h.GVK()); !ok {
					continue
				}
				res, err := off.Injector.Inject(context.Background(), Request{GVK: h.GVK(), Namespace: h.Metadata.Namespace, Raw: raw,
					OptedIn: true, NamespaceAnnotations: nonNil(off.namespaces[h.Metadata.Namespace])})
				require.NoError(t, err)
				if res.Audit {
					continue // the patch is reported, never applied
				}
				assert.Empty(t, res.Patch, "second pass over %s must change nothing", h.Metadata.Name)
			}
		})
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// TestGoldenPolicyNamesTheReleaseImage: docs/cli.md shows the golden
// policy and outputs; the agent image in them must be one a release
// produces (the chart's appVersion tag, without a v), not a made-up tag.
func TestGoldenPolicyNamesTheReleaseImage(t *testing.T) {
	assert.Equal(t, version.Image, goldenConfig(t).Agent.Image)
}
