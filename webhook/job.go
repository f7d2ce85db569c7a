package webhook

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/contract"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/mutators"
)

// replicaTemplate is one replica type's pod template inside a job.
type replicaTemplate struct {
	replicaType string
	template    *corev1.PodTemplateSpec
}

// mutateJob runs the template chain on every replica's pod template of a
// decoded job (obj) and returns the patch; base is an untouched copy of obj
// to diff against.
func (i *Injector) mutateJob(base, obj any, meta *metav1.ObjectMeta, templates []replicaTemplate, nsAnn map[string]string) (Result, error) {
	if contract.OptedOut(meta.Annotations) {
		return Result{Skipped: "job opted out with " + contract.AnnotationInject + "=" + contract.InjectDisabled}, nil
	}
	p, warnings := policy.Resolve(i.Config, nsAnn, meta.Annotations)
	var applied []string
	for _, rt := range templates {
		t := &mutators.Target{
			Meta:   &rt.template.ObjectMeta,
			Spec:   &rt.template.Spec,
			Policy: p,
			Where:  "spec.pytorchReplicaSpecs[" + rt.replicaType + "].template",
		}
		applied = append(applied, mutators.InjectTemplate(t)...)
		warnings = append(warnings, t.Warnings()...)
	}
	markJob(meta, p, applied)
	ops, err := typedDiff(&i.types, base, obj)
	if err != nil {
		return Result{}, fmt.Errorf("diffing mutated job: %w", err)
	}
	return Result{Patch: ops, Warnings: warnings}, nil
}

// markJob puts MindCluster's job-level vocabulary on the job itself (where
// MindCluster reads it) and the marker listing what any template received.
func markJob(meta *metav1.ObjectMeta, p *contract.Policy, applied []string) {
	t := &mutators.Target{Meta: meta, Policy: p}
	if p.Enabled(contract.InjectionRecoverStrategy) {
		mutators.RecoverStrategy(t)
	}
	mutators.Mark(meta, applied)
}

// sortedTemplates returns replica templates in a stable order, so warnings
// and patches are deterministic whatever the map order.
func sortedTemplates[R any](specs map[string]*R, template func(*R) *corev1.PodTemplateSpec) []replicaTemplate {
	keys := make([]string, 0, len(specs))
	for k, v := range specs {
		// A replica without containers (or without a name) is invalid and the
		// validating webhook says so; there is nothing to inject into.
		if v != nil && k != "" && len(template(v).Spec.Containers) > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]replicaTemplate, 0, len(keys))
	for _, k := range keys {
		out = append(out, replicaTemplate{replicaType: k, template: template(specs[k])})
	}
	return out
}
