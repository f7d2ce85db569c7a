package contract

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// AnnotationRequireDurableCheckpoints is the switch that, set to "true" on a
// namespace (or on a job or pod, which can only tighten it), makes admission refuse a training
// pod whose checkpoints would be written to storage that dies with the pod
// (the container's own filesystem, an emptyDir). Without it such a pod is
// admitted with a warning, an Event and a metric.
const AnnotationRequireDurableCheckpoints = Prefix + "require-durable-checkpoints"

// KnownAnnotations lists every trainguard.io/ annotation key any component
// reads or writes on jobs, pod templates, pods and namespaces. A key with
// the prefix that is not here is a typo and is refused (with the nearest
// key): every key a new feature writes must be added here.
func KnownAnnotations() []string { return slices.Clone(knownAnnotations()) }

// knownAnnotations is built once: admission checks every template against it.
var knownAnnotations = sync.OnceValue(func() []string { // immutable after its one build, like annotationTable.
	keys := []string{AnnotationInjected, AnnotationDecision, AnnotationReschedulesExhausted}
	for _, r := range annotationTable() {
		if strings.HasPrefix(r.key, Prefix) {
			keys = append(keys, r.key)
		}
	}
	return keys
})

// KnownLabels lists every trainguard.io/ label key, as KnownAnnotations.
func KnownLabels() []string {
	return []string{LabelManaged, LabelInjectEnabled, LabelBadNodes}
}

// ParseRequireDurable checks "true" or "false".
func ParseRequireDurable(v string) (bool, error) {
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf(`must be "true" or "false"`)
}
