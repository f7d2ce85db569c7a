package main

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/objdiff"
)

// diffObjects compares the object as the API server alone would store it
// with it as stored after trainguard's webhook, ignoring what the API
// server sets on every create (uid, resourceVersion, timestamps,
// managedFields, status) and the opt-out annotation that made the baseline.
func diffObjects(before, after *unstructured.Unstructured) []objdiff.Change {
	return objdiff.Diff(clean(before, true), clean(after, false))
}

func clean(u *unstructured.Unstructured, baseline bool) map[string]any {
	o := u.DeepCopy().Object
	delete(o, "status")
	if md, ok := o["metadata"].(map[string]any); ok {
		for _, k := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"} {
			delete(md, k)
		}
		if ann, ok := md["annotations"].(map[string]any); ok && baseline {
			delete(ann, contract.AnnotationInject)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
	}
	return o
}
