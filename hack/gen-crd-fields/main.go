// Command gen-crd-fields extracts the field structure (properties, JSON
// types, x-kubernetes-preserve-unknown-fields) of the operators' real CRDs
// from the Go module cache into internal/foundations/crdfields, which
// embeds it: `go generate ./internal/foundations/crdfields/`. Descriptions
// are dropped, so the files stay small; enum, minimum, maximum, maxLength,
// maxItems and required are kept for validation.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/crdfields"
	"github.com/trainguard/trainguard/test/chart"
)

// crd is one CRD file of a module and the version of it to extract;
// release names the operator release when several are embedded (Kubeflow
// Trainer: the cluster may run any supported one).
type crd struct {
	module, path string
	gvk          schema.GroupVersionKind
	release      string
}

// trainerCRDs are Kubeflow Trainer's kinds in each supported release
// (crdfields.TrainerReleases).
func trainerCRDs() []crd {
	var out []crd
	for _, rel := range crdfields.TrainerReleases {
		for _, k := range []struct{ kind, file string }{
			{"TrainJob", "trainjobs"},
			{"TrainingRuntime", "trainingruntimes"},
			{"ClusterTrainingRuntime", "clustertrainingruntimes"},
		} {
			out = append(out, crd{
				module:  "github.com/kubeflow/trainer/v2@" + rel,
				path:    "manifests/base/crds/trainer.kubeflow.org_" + k.file + ".yaml",
				gvk:     schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: k.kind},
				release: rel,
			})
		}
	}
	return out
}

func main() {
	out := flag.String("o", ".", "directory to write the schemas into")
	flag.Parse()
	crds := []crd{
		{chart.KubeflowTrainingModule, "manifests/base/crds/kubeflow.org_pytorchjobs.yaml", schema.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}, ""},
	}
	crds = append(crds, trainerCRDs()...)
	for _, c := range crds {
		if err := extract(c, *out); err != nil {
			fmt.Fprintln(os.Stderr, "gen-crd-fields:", err)
			os.Exit(1)
		}
	}
}

func extract(c crd, outDir string) error {
	dir, err := chart.ModuleDir(c.module)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, c.path))
	if err != nil {
		return err
	}
	var doc struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", c.path, err)
	}
	for _, v := range doc.Spec.Versions {
		if v.Name != c.gvk.Version {
			continue
		}
		out, err := json.Marshal(strip(v.Schema.OpenAPIV3Schema))
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(outDir, crdfields.FileNameAt(c.gvk, c.release)), append(out, '\n'), 0o644) // a source file
	}
	return fmt.Errorf("%s@%s %s: no version %s", c.module, c.path, c.gvk.Kind, c.gvk.Version)
}

// strip keeps what field validation needs.
func strip(s map[string]any) *crdfields.Node {
	n := &crdfields.Node{}
	n.Type, _ = s["type"].(string)
	n.Unknown, _ = s["x-kubernetes-preserve-unknown-fields"].(bool)
	if props, ok := s["properties"].(map[string]any); ok {
		n.Props = map[string]*crdfields.Node{}
		for k, v := range props {
			if m, ok := v.(map[string]any); ok {
				n.Props[k] = strip(m)
			}
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		n.Items = strip(items)
	}
	if add, ok := s["additionalProperties"].(map[string]any); ok {
		n.Additional = strip(add)
	}
	n.Enum, _ = s["enum"].([]any)
	n.Minimum = number(s["minimum"])
	n.Maximum = number(s["maximum"])
	for _, r := range asSlice(s["required"]) {
		if name, ok := r.(string); ok {
			n.Required = append(n.Required, name)
		}
	}
	n.MaxLength = count(s["maxLength"])
	n.MaxItems = count(s["maxItems"])
	return n
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// number is a bound as the CRD writes it (sigs.k8s.io/yaml decodes
// numbers as float64).
func number(v any) *json.Number {
	f, ok := v.(float64)
	if !ok {
		return nil
	}
	n := json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	return &n
}

func count(v any) *int64 {
	f, ok := v.(float64)
	if !ok {
		return nil
	}
	n := int64(f)
	return &n
}
