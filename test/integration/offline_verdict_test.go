package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/testing/repo"
)

// TestOfflineVerdictIsTheClusters: for every golden input and every broken
// input, `trainguard validate` (offline, default configuration) accepts
// exactly what this API server, with trainguard's webhooks and strict field
// validation (kubectl apply --validate=strict), accepts. Each document is
// sent as written (YAML, duplicate keys and all), in its own copy of the
// namespaces it names, opted in as inject assumes; a List is sent item by
// item, as kubectl does. Inputs of Kubeflow Trainer kinds are left to
// test/trainer: this control plane serves no Trainer webhook entries.
func TestOfflineVerdictIsTheClusters(t *testing.T) {
	root, err := repo.Root()
	require.NoError(t, err)
	bin, err := repo.BuildTrainguard(t.TempDir())
	require.NoError(t, err)

	goldens, err := filepath.Glob(filepath.Join(root, "webhook", "testdata", "*.in.yaml"))
	require.NoError(t, err)
	broken, err := filepath.Glob(filepath.Join(root, "cmd", "trainguard", "testdata", "broken", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, goldens)
	require.NotEmpty(t, broken)
	cs, err := kubernetes.NewForConfig(env.cp.Config)
	require.NoError(t, err)

	checked := 0
	for _, path := range append(goldens, broken...) {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		if bytes.Contains(data, []byte("apiVersion: trainer.kubeflow.org/")) {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			code, stdout, stderr, err := repo.Run(bin, nil, "validate", "-f", path)
			require.NoError(t, err)
			if code == 2 {
				return // unreadable input: kubectl refuses it before any request
			}
			refusals := applyAll(t, cs, data)
			assert.Equal(t, code == 1, len(refusals) > 0,
				"offline exit %d (%s%s) but the cluster refused %d document(s): %s", code, stdout, stderr, len(refusals), strings.Join(refusals, "; "))
		})
		checked++
	}
	t.Logf("%d inputs judged alike offline and by the cluster", checked)
}

// offlineInput counts inputs, so each gets namespaces of its own.
var offlineInput atomic.Int64 // a counter shared by subtests

// applyAll creates every document of data as kubectl apply --validate=strict
// would, each in a fresh copy of its namespace, and returns the refusals.
func applyAll(t *testing.T, cs *kubernetes.Clientset, data []byte) []string {
	t.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("ov%d-", offlineInput.Add(1))
	docs := yamlDocuments(t, data)
	renamed := map[string]string{}
	var refusals []string
	// The input's Namespaces first, as `validate` reads them from anywhere in the input.
	for _, doc := range docs {
		var ns corev1.Namespace
		if yaml.Unmarshal(doc, &ns) != nil || ns.Kind != "Namespace" || ns.APIVersion != "v1" {
			continue
		}
		name := prefix + ns.Name
		renamed[ns.Name] = name
		ns.Name, ns.ResourceVersion = name, ""
		if ns.Annotations == nil {
			ns.Annotations = map[string]string{}
		}
		if _, set := ns.Annotations[contract.AnnotationInject]; !set {
			ns.Annotations[contract.AnnotationInject] = contract.InjectEnabled
		}
		if err := env.c.Create(ctx, &ns); err != nil {
			refusals = append(refusals, err.Error())
		}
	}
	for _, doc := range docs {
		for _, item := range listItems(doc) {
			if err := createRaw(ctx, t, cs, item, prefix, renamed); err != nil {
				refusals = append(refusals, err.Error())
			}
		}
	}
	return refusals
}

// createRaw sends one document as written, in the renamed namespace.
func createRaw(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, doc []byte, prefix string, renamed map[string]string) error {
	t.Helper()
	var h jobs.Header
	raw, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return fmt.Errorf("kubectl: not YAML: %w", err)
	}
	if err := json.Unmarshal(raw, &h); err != nil || h.APIVersion == "" || h.Kind == "" {
		return errors.New("kubectl: not a Kubernetes object")
	}
	if h.GVK() == corev1.SchemeGroupVersion.WithKind("Namespace") {
		return nil // created above
	}
	gvk := h.GVK()
	mapping, err := env.c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("kubectl: no kind %s is served: %w", gvk, err)
	}
	ns := h.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	if _, ok := renamed[ns]; !ok {
		renamed[ns] = prefix + ns
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: renamed[ns], Annotations: map[string]string{contract.AnnotationInject: contract.InjectEnabled}}}
		require.NoError(t, env.c.Create(ctx, obj))
	}
	if h.Metadata.Namespace != "" {
		doc = regexp.MustCompile(`(?m)^(\s*namespace:\s*)`+regexp.QuoteMeta(h.Metadata.Namespace)+`\s*$`).ReplaceAll(doc, []byte("${1}"+renamed[ns]))
	}
	return cs.CoreV1().RESTClient().Post().
		AbsPath(resourcePath(mapping.Resource, renamed[ns])).
		Param("fieldValidation", "Strict").
		SetHeader("Content-Type", "application/yaml").
		Body(doc).Do(ctx).Error()
}

func resourcePath(r schema.GroupVersionResource, ns string) string {
	base := "/apis/" + r.Group + "/" + r.Version
	if r.Group == "" {
		base = "/api/" + r.Version
	}
	return base + "/namespaces/" + ns + "/" + r.Resource
}

// listItems splits a v1 List as kubectl does; any other document is itself.
func listItems(doc []byte) [][]byte {
	raw, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return [][]byte{doc}
	}
	var h jobs.Header
	if json.Unmarshal(raw, &h) != nil || !h.IsList() {
		return [][]byte{doc}
	}
	items, err := jobs.ListItems(raw)
	if err != nil {
		return [][]byte{doc}
	}
	out := make([][]byte, 0, len(items))
	for _, item := range items {
		y, err := yaml.JSONToYAML(item)
		if err != nil {
			y = item
		}
		out = append(out, y)
	}
	return out
}

// yamlDocuments splits a stream, dropping documents of comments only.
func yamlDocuments(t *testing.T, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		keep := false
		for _, line := range strings.Split(string(doc), "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && l != "---" {
				keep = true
			}
		}
		if keep {
			docs = append(docs, doc)
		}
	}
	return docs
}
