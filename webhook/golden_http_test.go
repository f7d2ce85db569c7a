package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// httpGolden mutates a YAML stream through the admission endpoints, the
// way the API server would call them: one AdmissionReview per object,
// namespaces read from the stream's Namespace documents (opted in, as
// `trainguard inject` assumes), a List's items sent one by one.
type httpGolden struct {
	t          *testing.T
	server     *Server
	namespaces map[string]map[string]string
	// trainJobs are read like the offline injector's (trainjob.go).
	trainJobs *Offline
	warnings  []string
}

func runHTTP(t *testing.T, cfg *configv1alpha1.Configuration, in []byte) ([]byte, []string) {
	t.Helper()
	g := &httpGolden{t: t, namespaces: map[string]map[string]string{}, trainJobs: NewOffline(cfg)}
	g.server = NewServer(Options{Config: cfg, TrainJobs: g.trainJobs.trainJob}, g.lookup, nil, logr.Discard())
	var out bytes.Buffer
	for i, doc := range splitDocs(t, in) {
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(g.document(doc))
	}
	return out.Bytes(), g.warnings
}

// lookup is the webhook's namespace reader: every namespace is opted in.
func (g *httpGolden) lookup(_ context.Context, name string) (map[string]string, bool, error) {
	ann := maps.Clone(g.namespaces[name])
	if ann == nil {
		ann = map[string]string{}
	}
	ann[contract.AnnotationInject] = contract.InjectEnabled
	return ann, true, nil
}

// document returns doc as the API server would store it after admission;
// unchanged byte for byte when no endpoint mutated it.
func (g *httpGolden) document(doc []byte) []byte {
	raw, err := yaml.YAMLToJSON(doc)
	require.NoError(g.t, err)
	out := g.object(raw)
	if out == nil {
		return doc
	}
	y, err := yaml.JSONToYAML(out)
	require.NoError(g.t, err)
	return y
}

// object admits one JSON object; nil means unchanged.
func (g *httpGolden) object(raw []byte) []byte {
	var h jobs.Header
	require.NoError(g.t, json.Unmarshal(raw, &h))
	if h.GVK() == namespaceGVK() {
		g.namespaces[h.Metadata.Name] = h.Metadata.Annotations
		return nil
	}
	if h.IsList() {
		return g.list(raw)
	}
	if h.GVK() == jobs.TrainJob().GVK {
		g.trainJobs.rememberTrainJob(h)
	}
	if _, ok := jobs.Builtin().For(h.GVK()); !ok {
		return nil
	}
	body := review(g.t, admissionv1.Create, metav1.GroupVersionKind(h.GVK()), h.Metadata.Namespace, raw, false)
	rec, resp := post(g.t, g.server, MutatePath(h.GVK()), bytes.NewReader(body), -1)
	require.Equal(g.t, http.StatusOK, rec.Code, rec.Body.String())
	require.True(g.t, resp.Response.Allowed)
	g.warnings = append(g.warnings, prefixWarnings(ObjectName(h), resp.Response.Warnings)...)
	if len(resp.Response.Patch) == 0 {
		return nil
	}
	patch, err := jsonpatchapply.DecodePatch(resp.Response.Patch)
	require.NoError(g.t, err)
	out, err := patch.Apply(raw)
	require.NoError(g.t, err, "the API server must be able to apply the patch")
	return out
}

func (g *httpGolden) list(raw []byte) []byte {
	items, err := jobs.ListItems(raw)
	require.NoError(g.t, err)
	changed := false
	for i, item := range items {
		if out := g.object(item); out != nil {
			items[i], changed = out, true
		}
	}
	if !changed {
		return nil
	}
	out, err := jobs.ReplaceListItems(raw, items)
	require.NoError(g.t, err)
	return out
}
