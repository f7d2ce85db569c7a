package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/policy"
)

// Offline mutates YAML documents as the webhook would for opted-in
// namespaces (`trainguard inject`). Namespace documents in the stream supply
// the annotations for later objects in that namespace, so overrides set on a
// namespace show up offline too.
type Offline struct {
	Injector   *Injector
	namespaces map[string]map[string]string
}

// NewOffline returns an offline injector using cfg.
func NewOffline(cfg *policy.Config) *Offline {
	return &Offline{Injector: &Injector{Config: cfg}, namespaces: map[string]map[string]string{}}
}

// typeHeader is what every document declares about itself.
type typeHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// InjectDocument returns doc mutated, or doc unchanged (byte for byte) when
// trainguard does not handle it or nothing applies.
func (o *Offline) InjectDocument(ctx context.Context, doc []byte) ([]byte, []string, error) {
	raw, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing YAML: %w", err)
	}
	var h typeHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		// Not an object (a list or a scalar): nothing for trainguard.
		return doc, nil, nil
	}
	kind := KindOf(schema.FromAPIVersionAndKind(h.APIVersion, h.Kind))
	if kind == KindNamespace {
		o.namespaces[h.Metadata.Name] = h.Metadata.Annotations
		return doc, nil, nil
	}
	if kind == KindUnknown {
		return doc, nil, nil
	}
	nsAnn := o.namespaces[h.Metadata.Namespace]
	if nsAnn == nil {
		nsAnn = map[string]string{}
	}
	res, err := o.Injector.Inject(ctx, Request{Kind: kind, Namespace: h.Metadata.Namespace, Raw: raw, OptedIn: true, NamespaceAnnotations: nsAnn})
	if err != nil {
		return nil, nil, err
	}
	warnings := prefixWarnings(h.Kind+"/"+h.Metadata.Name, res.Warnings)
	if len(res.Patch) == 0 {
		return doc, warnings, nil
	}
	out, err := ApplyPatch(raw, res)
	if err != nil {
		return nil, warnings, err
	}
	y, err := yaml.JSONToYAML(out)
	if err != nil {
		return nil, warnings, fmt.Errorf("encoding YAML: %w", err)
	}
	return y, warnings, nil
}

// ApplyPatch applies a Result's patch to raw JSON, as the API server would.
func ApplyPatch(raw []byte, res Result) ([]byte, error) {
	if len(res.Patch) == 0 {
		return raw, nil
	}
	pb, err := json.Marshal(res.Patch)
	if err != nil {
		return nil, fmt.Errorf("encoding patch: %w", err)
	}
	p, err := jsonpatchapply.DecodePatch(pb)
	if err != nil {
		return nil, fmt.Errorf("decoding patch: %w", err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		return nil, fmt.Errorf("applying patch: %w", err)
	}
	return out, nil
}

func prefixWarnings(prefix string, ws []string) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, prefix+": "+w)
	}
	return out
}
