package policy

import (
	"strings"
	"testing"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func TestCheckpointKeyOnlyFromTheObject(t *testing.T) {
	cfg := &configv1alpha1.Configuration{}
	p, warnings := Resolve(cfg, map[string]string{contract.AnnotationCheckpointKey: "ns-wide"}, nil)
	if p.CheckpointKey != "" || len(warnings) != 1 || !strings.Contains(warnings[0], "only a job or a pod") {
		t.Fatalf("namespace key applied: %q %v", p.CheckpointKey, warnings)
	}
	p, warnings = Resolve(cfg, nil, map[string]string{contract.AnnotationCheckpointKey: "shared"})
	if p.CheckpointKey != "shared" || len(warnings) != 0 {
		t.Fatalf("object key not applied: %q %v", p.CheckpointKey, warnings)
	}
	_, warnings = Resolve(cfg, nil, map[string]string{contract.AnnotationCheckpointKey: "../other"})
	if len(warnings) != 1 {
		t.Fatalf("bad key not warned: %v", warnings)
	}
	if errs := contract.ValidateAnnotations(map[string]string{contract.AnnotationCheckpointKey: "a/b"}, nil); len(errs) != 1 {
		t.Fatalf("validation accepted a/b: %v", errs)
	}
}
