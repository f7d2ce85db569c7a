package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/trainguard/trainguard/internal/foundations/objdiff"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/test/controlplane"
)

// doc is one object from examples/demo.
type doc struct {
	file string
	obj  *unstructured.Unstructured
	// expectRejected is set for files named *invalid*: the API server must refuse them.
	expectRejected bool
}

// loadExamples reads every *.yaml in dir, in file name order.
func loadExamples(dir string) ([]doc, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var docs []doc
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(m) == 0 {
				continue
			}
			u := &unstructured.Unstructured{Object: m}
			if u.GetKind() == "" || u.GetName() == "" {
				return nil, fmt.Errorf("%s: a document without kind or metadata.name", f)
			}
			docs = append(docs, doc{file: f, obj: u, expectRejected: strings.Contains(filepath.Base(f), "invalid")})
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no objects in %s/*.yaml", dir)
	}
	return docs, nil
}

// result is what happened to one object.
type result struct {
	doc      doc
	workload bool // a Pod or a PyTorchJob: trainguard must inject it
	// created is the object as stored, nil if refused.
	created  *unstructured.Unstructured
	injected string
	changes  []objdiff.Change
	warnings []string
	// refusal is the API server's error for a refused object.
	refusal error
	note    string
}

func (r *result) ref() string {
	o := r.doc.obj
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

func isWorkload(u *unstructured.Unstructured) bool {
	gvk := u.GroupVersionKind()
	return (gvk.Group == "" && gvk.Kind == "Pod") || gvk.Kind == "PyTorchJob"
}

// apply creates the objects one by one. An error means the demo could not
// run at all; refused or uninjected objects are reported in the results.
func apply(ctx context.Context, e *env, docs []doc) ([]*result, error) {
	// trainguard's own namespace, as a Helm install would have it.
	nsGVR := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	own := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": controlplane.Namespace},
	}}
	if _, err := e.dyn.Resource(nsGVR).Create(ctx, own, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", controlplane.Namespace, err)
	}

	probed := map[string]bool{}
	var results []*result
	for _, d := range docs {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		r := &result{doc: d, workload: isWorkload(d.obj)}
		results = append(results, r)
		ri, err := e.resource(d.obj)
		if err != nil {
			return results, fmt.Errorf("%s: %w", r.ref(), err)
		}
		if r.workload && !probed[d.obj.GetNamespace()] {
			if err := e.waitNamespaceSeen(ctx, d.obj.GetNamespace()); err != nil {
				return results, err
			}
			probed[d.obj.GetNamespace()] = true
		}

		var baseline *unstructured.Unstructured
		if r.workload && !d.expectRejected {
			// The same object opted out, not stored: what the API server
			// alone makes of it, so the diff shows trainguard's changes only.
			optOut := d.obj.DeepCopy()
			ann := optOut.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[contract.AnnotationInject] = contract.InjectDisabled
			optOut.SetAnnotations(ann)
			baseline, err = ri.Create(ctx, optOut, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil || baseline.GetAnnotations()[contract.AnnotationInjected] != "" {
				baseline = d.obj.DeepCopy() // fall back to the file's content
			}
		}

		e.warnings.Take()
		created, err := ri.Create(ctx, d.obj.DeepCopy(), metav1.CreateOptions{})
		r.warnings = e.warnings.Take()
		if err != nil {
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
			r.refusal = err
			continue
		}
		r.created = created
		switch {
		case r.workload:
			r.injected = created.GetAnnotations()[contract.AnnotationInjected]
			r.changes = diffObjects(baseline, created)
		case d.obj.GetKind() == "Namespace" && d.obj.GetAnnotations()[contract.AnnotationInject] == contract.InjectEnabled:
			if err := e.waitNamespaceLabel(ctx, d.obj.GetName()); err != nil {
				r.note = err.Error()
			} else {
				r.note = fmt.Sprintf("opted in: label %s=%s mirrored from the annotation", contract.LabelInjectEnabled, contract.InjectEnabled)
			}
		case d.obj.GroupVersionKind().Group == "trainer.kubeflow.org":
			r.note = "admitted by trainguard's Trainer webhook (no Trainer controller here: no pods)"
		default:
			r.note = "created"
		}
	}
	return results, nil
}

// resource is the dynamic client for an object's kind and namespace.
func (e *env) resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return e.dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return e.dyn.Resource(m.Resource), nil
}

// waitNamespaceLabel waits until the namespace carries the opt-in label
// (set by the namespace webhook, or by trainguard's reconciler).
func (e *env) waitNamespaceLabel(ctx context.Context, name string) error {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	return poll(ctx, 30*time.Second, func() (bool, error) {
		ns, err := e.dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ns.GetLabels()[contract.LabelInjectEnabled] == contract.InjectEnabled, nil
	}, "namespace "+name+" did not get the "+contract.LabelInjectEnabled+" label")
}

// waitNamespaceSeen waits until trainguard's informer cache knows the
// namespace (the webhook skips namespaces it has not seen yet), with a
// dry-run pod that must come back injected.
func (e *env) waitNamespaceSeen(ctx context.Context, ns string) error {
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "trainguard-demo-probe", "namespace": ns},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "pytorch", "image": "busybox"}}},
	}}
	pods := e.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace(ns)
	defer e.warnings.Take()
	return poll(ctx, 30*time.Second, func() (bool, error) {
		got, err := pods.Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		return got.GetAnnotations()[contract.AnnotationInjected] != "", nil
	}, "trainguard did not start injecting namespace "+ns)
}

// poll calls f every 100ms until it returns true, returning the last error
// (or msg) after the timeout.
func poll(ctx context.Context, timeout time.Duration, f func() (bool, error), msg string) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%s within %s: %w", msg, timeout, err)
			}
			return fmt.Errorf("%s within %s", msg, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
