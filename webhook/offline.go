package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// Offline mutates YAML documents as the webhook would for opted-in
// namespaces (`trainguard inject`). Namespace documents in the stream supply
// the annotations for later objects in that namespace, so overrides set on a
// namespace show up offline too.
type Offline struct {
	Injector   *Injector
	namespaces map[string]map[string]string
	trainJobs  map[string]map[string]string
}

// NewOffline returns an offline injector using cfg.
func NewOffline(cfg *configv1alpha1.Configuration) *Offline {
	kinds := jobs.Builtin()
	o := &Offline{Injector: &Injector{Scope: policy.Scope{Config: cfg}, Kinds: &kinds}, namespaces: map[string]map[string]string{}, trainJobs: map[string]map[string]string{}}
	o.Injector.TrainJobs = o.trainJob
	return o
}

// SetNamespaces gives the annotations of the Namespaces of the whole input
// up front, so an object is mutated the same wherever its Namespace
// appears in the stream (and as `trainguard validate` sees it).
func (o *Offline) SetNamespaces(ns map[string]map[string]string) {
	for name, ann := range ns {
		o.namespaces[name] = ann
	}
}

// InjectDocument returns doc mutated, or doc unchanged (byte for byte) when
// trainguard does not handle it or nothing applies. A v1 List has each of
// its items mutated, as `trainguard validate` checks each.
func (o *Offline) InjectDocument(ctx context.Context, doc []byte) ([]byte, []string, error) {
	raw, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing YAML: %w", err)
	}
	out, warnings, err := o.injectObject(ctx, raw)
	if err != nil || out == nil {
		return doc, warnings, err
	}
	y, err := yaml.JSONToYAML(out)
	if err != nil {
		return nil, warnings, fmt.Errorf("encoding YAML: %w", err)
	}
	return y, warnings, nil
}

// injectObject mutates one JSON object; nil out means unchanged. Warnings
// name the object (Kind/name), as the golden files record them.
func (o *Offline) injectObject(ctx context.Context, raw []byte) ([]byte, []string, error) {
	return o.inject(ctx, raw, true)
}

// optedOut reports whether h's namespace opted out in the input.
func (o *Offline) optedOut(h jobs.Header) bool {
	return contract.OptedOut(o.namespaces[h.Metadata.Namespace])
}

// TrainJobAnnotations is the offline validators.TrainJobAnnotations: the
// annotations of a TrainJob seen earlier in the input, so a trainer pod is
// validated against the policy it was injected with, as online.
func (o *Offline) TrainJobAnnotations(namespace, name string) (map[string]string, bool, error) {
	return o.trainJob(context.Background(), namespace, name)
}

// InjectObject mutates one JSON object as the webhook would; out is nil
// when it is unchanged. The warnings of an object are not prefixed: the
// caller names the object (`trainguard validate` and `inject` print
// "Kind/namespace/name: warning: ..."); a List's items' warnings are.
func (o *Offline) InjectObject(ctx context.Context, raw []byte) ([]byte, []string, error) {
	return o.inject(ctx, raw, false)
}

func (o *Offline) inject(ctx context.Context, raw []byte, named bool) ([]byte, []string, error) {
	var h jobs.Header
	if err := json.Unmarshal(raw, &h); err != nil {
		// Not an object (a scalar): nothing for trainguard.
		return nil, nil, nil
	}
	switch {
	case h.GVK() == namespaceGVK():
		o.namespaces[h.Metadata.Name] = h.Metadata.Annotations
		return nil, nil, nil
	case h.IsList():
		return o.injectList(ctx, raw)
	case h.GVK() == trainerv1alpha1.GroupVersion.WithKind(trainerv1alpha1.TrainJobKind):
		o.rememberTrainJob(h)
	}
	nsAnn := o.namespaces[h.Metadata.Namespace]
	if nsAnn == nil {
		nsAnn = map[string]string{}
	}
	if o.optedOut(h) {
		// The webhook never sees objects of a namespace that opted out.
		return nil, []string{ObjectName(h) + ": " + Unchanged(fmt.Sprintf("namespace %s is annotated %s=%s", h.Metadata.Namespace, contract.AnnotationInject, contract.InjectDisabled))}, nil
	}
	if !o.Handles(h.GVK()) {
		// The webhook is never sent it; the CLI says why (Handles).
		return nil, nil, nil
	}
	res, err := o.Injector.Inject(ctx, Request{GVK: h.GVK(), Namespace: h.Metadata.Namespace, Raw: raw, OptedIn: true, NamespaceAnnotations: nsAnn})
	if err != nil {
		return nil, nil, err
	}
	warnings := res.Warnings
	if res.Skipped != "" {
		warnings = append(warnings, Unchanged(res.Skipped))
	}
	if named {
		warnings = prefixWarnings(ObjectName(h), warnings)
	}
	if len(res.Patch) == 0 {
		return nil, warnings, nil
	}
	if res.Audit {
		w := auditWouldInject(wouldInject(raw, res.Patch), len(res.Patch))
		if named {
			w = ObjectName(h) + ": " + w
		}
		return nil, append(warnings, w), nil
	}
	out, err := admissionio.ApplyPatch(raw, res.Patch)
	return out, warnings, err
}

// injectList mutates each item of a v1 List; nil out when none changed.
func (o *Offline) injectList(ctx context.Context, raw []byte) ([]byte, []string, error) {
	items, err := jobs.ListItems(raw)
	if err != nil {
		return nil, nil, err
	}
	var warnings []string
	changed := false
	for n, item := range items {
		out, ws, err := o.injectObject(ctx, item)
		warnings = append(warnings, ws...)
		if err != nil {
			return nil, warnings, fmt.Errorf("item %d of the List: %w", n, err)
		}
		if out != nil {
			items[n], changed = out, true
		}
	}
	if !changed {
		return nil, warnings, nil
	}
	out, err := jobs.ReplaceListItems(raw, items)
	return out, warnings, err
}

// Handles reports whether trainguard's webhooks are sent objects of gvk;
// `inject` and `validate` say why any other object is left unchanged.
func (o *Offline) Handles(gvk schema.GroupVersionKind) bool {
	_, ok := o.Injector.kinds().For(gvk)
	return ok
}

// Audited reports whether objects in namespace ns are admitted in audit
// mode, as the input's Namespace documents and the configuration say.
func (o *Offline) Audited(ns string) bool {
	return contract.Audited(o.Injector.Config.AdmissionMode, o.namespaces[ns])
}

// AuditRefusal is the warning audit mode turns a refusal into.
func AuditRefusal(err string) string { return auditWouldRefuse(err) }

// ObjectName is how every command names an object in its messages:
// Kind/namespace/name, or Kind/name for an object without a namespace.
func ObjectName(h jobs.Header) string {
	if h.Metadata.Namespace == "" {
		return h.Kind + "/" + h.Metadata.Name
	}
	return h.Kind + "/" + h.Metadata.Namespace + "/" + h.Metadata.Name
}

func prefixWarnings(prefix string, ws []string) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, prefix+": "+w)
	}
	return out
}
