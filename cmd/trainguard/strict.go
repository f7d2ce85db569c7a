package main

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/crdfields"
	"github.com/trainguard/trainguard/internal/foundations/typecheck"
	"github.com/trainguard/trainguard/internal/jobs"
)

// The structural checks kubectl apply --validate=strict and the API server
// make before any trainguard rule runs: an object whose apiVersion, kind or
// field types are wrong never reaches a webhook, so offline it must be
// refused here, with every problem listed.

// typeMeta reads apiVersion and kind from a generic object; a problem is
// returned as the report line.
func typeMeta(obj map[string]any) (schema.GroupVersionKind, string) {
	apiVersion, okV := obj["apiVersion"].(string)
	kind, okK := obj["kind"].(string)
	if !okV || !okK || apiVersion == "" || kind == "" {
		return schema.GroupVersionKind{}, "not a Kubernetes object: apiVersion and kind must be set (strings), e.g. apiVersion: kubeflow.org/v1, kind: PyTorchJob"
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Sprintf("apiVersion: Invalid value: %q: %v", apiVersion, err)
	}
	return gv.WithKind(kind), ""
}

// trainguardKinds are the kinds trainguard handles, by kind, with the
// apiVersions served for each.
func trainguardKinds() map[string][]string {
	kinds := map[string][]string{"Namespace": {"v1"}}
	for _, a := range jobs.Builtin().All() {
		gvk := a.GVK
		kinds[gvk.Kind] = append(kinds[gvk.Kind], gvk.GroupVersion().String())
	}
	return kinds
}

// apiVersionProblem refuses an apiVersion no cluster serves for a kind
// trainguard knows (kubeflow.org/v2 PyTorchJob), a kind that is a typo of
// one in a group trainguard knows (kubeflow.org/v1 PytorchJob), and a
// built-in kind in a version of its group the API server does not serve.
func apiVersionProblem(gvk schema.GroupVersionKind) string {
	kinds := trainguardKinds()
	if versions, ok := kinds[gvk.Kind]; ok {
		if !slices.Contains(versions, gvk.GroupVersion().String()) {
			return fmt.Sprintf("apiVersion: Unsupported value: %q: no %s is served in this version; use %s", gvk.GroupVersion().String(), gvk.Kind, strings.Join(versions, " or "))
		}
		return ""
	}
	if msg := kindTypo(gvk, kinds); msg != "" {
		return msg
	}
	return builtinVersionProblem(gvk)
}

// kindTypo catches a misspelt kind in an apiVersion trainguard handles.
func kindTypo(gvk schema.GroupVersionKind, kinds map[string][]string) string {
	var candidates []string
	for kind, versions := range kinds {
		if slices.Contains(versions, gvk.GroupVersion().String()) {
			candidates = append(candidates, kind)
		}
	}
	sort.Strings(candidates)
	for _, c := range candidates {
		if strings.EqualFold(c, gvk.Kind) || (len(gvk.Kind) >= 6 && contract.Nearest(gvk.Kind, []string{c}) != "") {
			return fmt.Sprintf("kind: Unsupported value: %q: not a kind of %s; did you mean %s?", gvk.Kind, gvk.GroupVersion().String(), c)
		}
	}
	return ""
}

// builtinVersionProblem refuses apps/v1beta1 Deployment and the like: the
// kind exists in the group, but not in this version.
func builtinVersionProblem(gvk schema.GroupVersionKind) string {
	if clientgoscheme.Scheme.Recognizes(gvk) {
		return ""
	}
	var served []string
	for known := range clientgoscheme.Scheme.AllKnownTypes() {
		if known.Group == gvk.Group && known.Kind == gvk.Kind && !strings.HasSuffix(known.Version, "internal") {
			served = append(served, known.GroupVersion().String())
		}
	}
	if len(served) == 0 {
		return ""
	}
	sort.Strings(served)
	return fmt.Sprintf("apiVersion: Unsupported value: %q: no %s is served in this version; use %s", gvk.GroupVersion().String(), gvk.Kind, strings.Join(served, " or "))
}

// goType is the Go type of a kind's objects: trainguard's own for the
// kinds it handles, client-go's for built-in kinds; nil when unknown (a
// custom resource trainguard does not handle passes unchecked).
func goType(gvk schema.GroupVersionKind) reflect.Type {
	if gvk == corev1.SchemeGroupVersion.WithKind("Namespace") {
		return reflect.TypeOf(corev1.Namespace{})
	}
	if a, ok := jobs.Builtin().For(gvk); ok {
		if job, err := a.Decode([]byte("{}")); err == nil {
			return reflect.TypeOf(job.Object())
		}
	}
	if obj, err := clientgoscheme.Scheme.New(gvk); err == nil {
		return reflect.TypeOf(obj)
	}
	return nil
}

// structuralProblems are the lines for one object: apiVersion and kind,
// then every type error and unknown field. No errors means the trainguard
// rules may run.
func structuralProblems(obj map[string]any) (gvk schema.GroupVersionKind, errs, warnings []string) {
	gvk, msg := typeMeta(obj)
	if msg != "" {
		return gvk, []string{msg}, nil
	}
	if msg := apiVersionProblem(gvk); msg != "" {
		return gvk, []string{msg}, nil
	}
	t := goType(gvk)
	if t == nil {
		return gvk, nil, nil
	}
	errs, unknown := typecheck.Check(obj, t)
	if gvk.Group != trainerGroup {
		return gvk, withCRDSchema(gvk, obj, slices.Concat(errs, unknown)), nil
	}
	// trainguard's Go types are Trainer v2.0's and know only the fields it
	// reads: the CRDs of every supported release judge unknown fields.
	errs, warnings = withTrainerSchemas(gvk, obj, errs)
	return gvk, errs, warnings
}

// withTrainerSchemas judges a Kubeflow Trainer object against the CRD of
// every supported Trainer release (crdfields.TrainerReleases), as each
// release's API server with strict field validation would: offline the
// cluster's release is unknown, so what every release refuses (a typo:
// spec.trainer.numNode) is an error, and what only some refuse (v2.3's
// runtimePatches on a v2.0 cluster) a warning naming them.
func withTrainerSchemas(gvk schema.GroupVersionKind, obj map[string]any, errs []string) (_, warnings []string) {
	lines := map[string]string{}       // path: the newest release's line
	refusedBy := map[string][]string{} // path: the releases refusing it
	var paths []string
	schemas := 0
	for _, rel := range crdfields.TrainerReleases {
		node, ok, err := crdfields.ForRelease(gvk, rel)
		if err != nil {
			return append(errs, err.Error()), nil
		}
		if !ok {
			continue
		}
		schemas++
		for _, line := range crdfields.Check(obj, node) {
			path := linePath(line)
			if _, seen := lines[path]; !seen {
				paths = append(paths, path)
			}
			lines[path] = line
			if !slices.Contains(refusedBy[path], rel) {
				refusedBy[path] = append(refusedBy[path], rel)
			}
		}
	}
	for _, path := range paths {
		line := lines[path]
		switch {
		case coveredByTypeError(line, errs):
		case len(refusedBy[path]) == schemas:
			errs = append(errs, line)
		default:
			var accepting []string
			for _, rel := range crdfields.TrainerReleases {
				if !slices.Contains(refusedBy[path], rel) {
					accepting = append(accepting, rel)
				}
			}
			warnings = append(warnings, fmt.Sprintf("%s (Kubeflow Trainer %s refuses it, %s accepts it: your cluster's release decides)",
				line, strings.Join(refusedBy[path], ", "), strings.Join(accepting, ", ")))
		}
	}
	return errs, warnings
}

// linePath is the field path a problem line starts with.
func linePath(line string) string {
	path, _, _ := strings.Cut(line, ": ")
	return path
}

// withCRDSchema adds what the kind's real CRD schema refuses (unknown
// fields and wrong JSON types anywhere in the object, as the API server's
// strict field validation) to errs, once each: trainguard's partial Go
// types know only the fields it reads.
func withCRDSchema(gvk schema.GroupVersionKind, obj map[string]any, errs []string) []string {
	node, ok, err := crdfields.For(gvk)
	if err != nil {
		return append(errs, err.Error())
	}
	if !ok {
		return errs
	}
	seen := map[string]bool{}
	for _, e := range errs {
		seen[e] = true
	}
	for _, e := range crdfields.Check(obj, node) {
		if !seen[e] && !coveredByTypeError(e, errs) {
			seen[e] = true
			errs = append(errs, e)
		}
	}
	return errs
}

// coveredByTypeError: the Go type already said what is wrong at this path
// (an int32 overflow, a quantity), in more precise words.
func coveredByTypeError(line string, errs []string) bool {
	path := linePath(line)
	for _, e := range errs {
		if strings.HasPrefix(e, path+": ") {
			return true
		}
	}
	return false
}

// trainerGroup is Kubeflow Trainer v2's API group.
const trainerGroup = "trainer.kubeflow.org"
