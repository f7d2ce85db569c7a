package validators

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
)

// checkJob validates any handled kind through its adapter: the kind's own
// rules, then the cross-field checks of the object against its effective
// policy. Pods cover bare torchelastic pods and pods of any other
// controller; they are cross-checked only when trainguard injected them
// (the mutating webhook ran first and left its marker): any other pod in
// the namespace, an etcd for the rendezvous or the pods of an opted-out
// job, owes TaskD nothing and must not be refused for it.
func (v *Validator) checkJob(a *jobs.Adapter, job jobs.Job, nsAnnotations map[string]string) Result {
	res := v.kindRules(a, job)
	for _, tpl := range job.Templates() {
		res.Errors = append(res.Errors, extendedResourceErrors(tpl.Spec, tpl.SpecPath())...)
	}
	ann := job.Meta().Annotations
	if policy.OptOut(ann) != "" || (a.Pod != nil && !contract.Injected(ann)) {
		return res
	}
	errs, warnings, ephemeral := v.crossCheck(a, job, nsAnnotations)
	errs, warnings = jobs.AdvisoryCrossCheck(a, errs, warnings)
	res.Errors = append(res.Errors, errs...)
	res.Warnings = append(res.Warnings, warnings...)
	res.EphemeralCheckpoints = ephemeral
	return res
}

// kindRules are the checks particular to one kind, which need no policy;
// the adapter has them. A kind without any gets the generic ones: the
// trainguard annotations and labels of the object and of each pod template.
func (v *Validator) kindRules(a *jobs.Adapter, job jobs.Job) Result {
	if a.Validate != nil {
		return fromRules(a.Validate(job, jobs.RuleEnv{Runtimes: v.Runtimes}))
	}
	errs := contract.ValidateMetadata(job.Meta(), field.NewPath("metadata"))
	for _, tpl := range job.Templates() {
		if tpl.Path != nil { // a Pod's single template is the Pod itself
			errs = append(errs, contract.ValidateMetadata(tpl.Meta, tpl.MetaPath())...)
		}
	}
	return Result{Errors: errs}
}

// crossCheck compares the object with its effective policy.
func (v *Validator) crossCheck(a *jobs.Adapter, job jobs.Job, nsAnnotations map[string]string) (field.ErrorList, []string, []EphemeralCheckpoint) {
	meta := job.Meta()
	p, warnings := v.resolveFor(a, job, nsAnnotations)
	e := job.Elastic()
	var errs field.ErrorList
	for _, tpl := range job.Templates() {
		errs = append(errs, checkTaskDPort(p, tpl.Spec, tpl.SpecPath())...)
		errs = append(errs, checkInProcess(p, a.GVK.Kind, e.Enabled, tpl.Spec, tpl.SpecPath())...)
		warnings = append(warnings, gpuCountWarning(p, tpl.Spec, tpl.SpecPath())...)
		if e.NprocPerNode > 0 {
			warnings = append(warnings, nprocAboveGPUWarning(p, e.NprocPerNode, e.NprocPath, tpl.Spec, tpl.SpecPath())...)
		}
	}
	switch {
	case e.Path == nil:
		// The kind does not train elastically (a Pod).
	case !e.Enabled:
		warnings = append(warnings, elasticStrategyWarning(p, meta.Annotations, field.NewPath("metadata"), e.Path)...)
	}
	durableErrs, durableWarnings, ephemeral := durableCheckpoints(p, a, job)
	return append(errs, durableErrs...), append(warnings, durableWarnings...), ephemeral
}
