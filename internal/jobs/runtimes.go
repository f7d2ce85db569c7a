package jobs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
)

// RuntimeLookup finds the runtime a TrainJob refers to: kind is
// TrainingRuntime (in namespace) or ClusterTrainingRuntime. known is false
// when the answer cannot be known (offline, the runtime not in the input);
// then spec is nil and the checks needing it are skipped with a warning.
// Known and nil means the runtime does not exist.
type RuntimeLookup func(namespace, kind, name string) (spec *trainerv1alpha1.TrainingRuntimeSpec, known bool, err error)

// runtimeOf resolves the TrainJob's runtime through lookup: the
// runtime, or a warning saying why it is unknown, or the error Trainer
// gives for a missing one.
func runtimeOf(lookup RuntimeLookup, tj *trainerv1alpha1.TrainJob) (*trainerv1alpha1.TrainingRuntimeSpec, string, field.ErrorList) {
	kind, name := RuntimeRefKey(tj.Spec.RuntimeRef)
	if lookup == nil || name == "" || !contains(runtimeKinds(), kind) {
		return nil, "", nil
	}
	spec, known, err := lookup(tj.Namespace, kind, name)
	refPath := field.NewPath("spec", "runtimeRef")
	switch {
	case err != nil:
		return nil, fmt.Sprintf("%s: could not read %s %q (%v); the checks that need the runtime were skipped", refPath, kind, name, err), nil
	case !known:
		return nil, fmt.Sprintf("%s: %s %q is not known here (offline, add it to the input); the checks that need the runtime were skipped", refPath, kind, name), nil
	case spec == nil:
		return nil, "", field.ErrorList{field.Invalid(refPath, name,
			fmt.Sprintf("unsupported runtime: %s %q does not exist%s; create it first or refer to an existing runtime", kind, name, inNamespace(kind, tj.Namespace)))}
	}
	return spec, "", nil
}

func inNamespace(kind, ns string) string {
	if kind == trainerv1alpha1.TrainingRuntimeKind && ns != "" {
		return " in namespace " + ns
	}
	return ""
}
