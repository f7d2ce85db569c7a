package validators

import (
	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/jobs"
)

// RuntimeSet holds the runtimes found in `trainguard validate`'s input, so
// a TrainJob is checked against the runtime in the same file. A runtime
// not in the input is unknown (never "missing"): offline, the cluster
// may well have it.
type RuntimeSet struct {
	specs map[string]*trainerv1alpha1.TrainingRuntimeSpec
}

// NewRuntimeSet returns an empty set.
func NewRuntimeSet() *RuntimeSet {
	return &RuntimeSet{specs: map[string]*trainerv1alpha1.TrainingRuntimeSpec{}}
}

// Add records raw when it is a TrainingRuntime or ClusterTrainingRuntime;
// anything else, or an undecodable runtime, is ignored (it is reported
// when validated itself).
func (s *RuntimeSet) Add(raw []byte) {
	var h jobs.Header
	if jobs.Decode(raw, &h) != nil {
		return
	}
	a, ok := jobs.Builtin().For(h.GVK())
	if !ok {
		return
	}
	if a.ClusterScoped {
		h.Metadata.Namespace = ""
	}
	j, err := a.Decode(raw)
	if err != nil {
		return
	}
	if spec, ok := jobs.RuntimeSpecOf(j); ok {
		s.specs[runtimeSetKey(h.Kind, h.Metadata.Namespace, h.Metadata.Name)] = spec
	}
}

// Lookup implements RuntimeLookup over the set.
func (s *RuntimeSet) Lookup(namespace, kind, name string) (*trainerv1alpha1.TrainingRuntimeSpec, bool, error) {
	if kind == trainerv1alpha1.ClusterTrainingRuntimeKind {
		namespace = ""
	}
	spec, ok := s.specs[runtimeSetKey(kind, namespace, name)]
	return spec, ok, nil
}

func runtimeSetKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }
