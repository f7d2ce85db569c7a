package validators

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/jobs"
)

// Kubeflow Trainer changed its v1alpha1 API without a new version:
//   - v2.2 removed a runtime's mlPolicy.torch.numProcPerNode and
//     mlPolicy.torch.elasticPolicy (v2.0 and v2.1 have them; trainguard
//     checks the elastic policy there);
//   - v2.2 made a TrainJob's spec.trainer.numProcPerNode an int32 (up to
//     v2.1 an int or auto, cpu, gpu);
//   - v2.1 replaced a TrainJob's spec.podSpecOverrides with
//     podTemplateOverrides, and v2.2 that with runtimePatches.
//
// The webhook needs nothing for this: it sees an object after the API
// server decoded it against the CRD the cluster serves, which drops (or,
// under strict field validation, refuses) a field that version lacks and
// refuses a wrong type. `trainguard validate` cannot know the cluster, so
// it applies the v2.0 rules and warns with TrainerVersionWarnings.

// TrainerVersionWarnings returns one warning per field of a Trainer object
// (raw JSON of kind gvk) that only some Trainer releases have. Other kinds
// and undecodable objects give none (Validate reports those).
func TrainerVersionWarnings(gvk schema.GroupVersionKind, raw []byte) []string {
	if gvk.GroupVersion() != trainerv1alpha1.GroupVersion {
		return nil
	}
	switch gvk.Kind {
	case trainerv1alpha1.TrainingRuntimeKind, trainerv1alpha1.ClusterTrainingRuntimeKind:
		var rt trainerv1alpha1.TrainingRuntime
		if jobs.Decode(raw, &rt) != nil {
			return nil
		}
		return runtimeVersionWarnings(rt.Spec.MLPolicy)
	case trainerv1alpha1.TrainJobKind:
		var tj trainerv1alpha1.TrainJob
		if jobs.Decode(raw, &tj) != nil {
			return nil
		}
		return trainJobVersionWarnings(&tj.Spec)
	}
	return nil
}

// removedBy22 is the common end of the removed-field warnings.
const removedBy22 = "Kubeflow Trainer v2.2+ removed this field (a cluster serving v2.2 or newer rejects it under strict field validation, as kubectl applies it, or silently drops it otherwise); it exists only in Trainer v2.0 and v2.1"

func runtimeVersionWarnings(ml *trainerv1alpha1.MLPolicy) []string {
	if ml == nil || ml.Torch == nil {
		return nil
	}
	torchPath := field.NewPath("spec", "mlPolicy", "torch")
	var out []string
	if ml.Torch.NumProcPerNode != nil {
		out = append(out, fmt.Sprintf("%s: %s; from v2.2 set numProcPerNode on each TrainJob (spec.trainer.numProcPerNode, an integer)", torchPath.Child("numProcPerNode"), removedBy22))
	}
	if ml.Torch.ElasticPolicy != nil {
		out = append(out, fmt.Sprintf("%s: %s, and with it elastic torchrun (--nnodes=min:max); on v2.2+ the runtime runs a fixed numNodes", torchPath.Child("elasticPolicy"), removedBy22))
	}
	return out
}

func trainJobVersionWarnings(spec *trainerv1alpha1.TrainJobSpec) []string {
	specPath := field.NewPath("spec")
	var out []string
	if len(spec.PodSpecOverrides) > 0 {
		out = append(out, fmt.Sprintf("%s: exists only in Kubeflow Trainer v2.0 (v2.1 replaced it with podTemplateOverrides, v2.2 with runtimePatches); a newer cluster rejects it under strict field validation or silently drops it", specPath.Child("podSpecOverrides")))
	}
	if n := spec.Trainer; n != nil && n.NumProcPerNode != nil && n.NumProcPerNode.Type == intstr.String {
		out = append(out, fmt.Sprintf("%s: Kubeflow Trainer v2.2+ takes only an integer here (a cluster serving v2.2 or newer rejects %q); omit it for auto, or set the number of processes per node", specPath.Child("trainer", "numProcPerNode"), n.NumProcPerNode.StrVal))
	}
	return out
}
