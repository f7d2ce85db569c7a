// Package webhook serves trainguard's admission endpoints and holds the one
// code path that both the webhook and `trainguard inject` use to mutate an
// object (Injector; Offline for the CLI): decode, ask policy.Scope whether
// the object is trainguard's, resolve its policy, call mutators.MutateJob
// or MutatePod once, and diff the result (admissionio.TypedDiff). Admission
// flows one way through it: it decides whether, the mutators decide what.
// The validators' typed findings (never their messages, which may quote a
// tenant's values) become the ephemeral-checkpoint Event, folded to one per
// namespace a minute (eventfold.go), and its metric.
package webhook

import (
	"context"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/mutators"
)

// Injector decides whether an object is mutated and computes the patch.
type Injector struct {
	policy.Scope
	// Avoider gives the nodes a new pod must avoid; nil means none.
	Avoider podspec.NodeAvoider
	// Kinds are the kinds handled; the zero value means jobs.Builtin().
	Kinds *jobs.Kinds
	// TrainJobs reads the TrainJob a pod's labels name; nil means pods
	// are never taken for TrainJob pods (see trainjob.go).
	TrainJobs TrainJobLookup
	types     admissionio.TypeCache
}

// Request is one object to mutate.
type Request struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Raw       []byte
	// OptedIn skips the namespace opt-in check (trainguard inject).
	OptedIn bool
	// NamespaceAnnotations, when non-nil, are used instead of a lookup.
	NamespaceAnnotations map[string]string
}

// Result is the outcome: a patch (possibly empty), warnings, and why
// nothing was done when Skipped is set.
type Result struct {
	Patch    []jsonpatch.Operation
	Warnings []string
	Skipped  string
	// Audit: the object's namespace is in audit mode (contract.Audited):
	// the caller reports the patch and admits the object unchanged.
	Audit bool
}

func (i *Injector) kinds() jobs.Kinds {
	if i.Kinds == nil {
		return jobs.Builtin()
	}
	return *i.Kinds
}

// Unchanged is the warning, online (admission) and offline (inject,
// validate) alike, for an object trainguard leaves as it is: it must never
// be left alone in silence.
func Unchanged(reason string) string { return "left unchanged by trainguard: " + reason }

// Inject mutates req's object as the webhook would.
func (i *Injector) Inject(ctx context.Context, req Request) (Result, error) {
	adapter, ok := i.kinds().For(req.GVK)
	if !ok {
		return Result{Skipped: "kind not handled"}, nil
	}
	nsAnn := req.NamespaceAnnotations
	if nsAnn == nil && !req.OptedIn {
		ann, skip, err := i.Namespace(ctx, req.Namespace)
		if err != nil || skip != "" {
			return Result{Skipped: skip}, err
		}
		nsAnn = ann
	}
	res, err := i.injectIn(ctx, req, adapter, nsAnn)
	res.Audit = contract.Audited(i.Config.AdmissionMode, nsAnn)
	return res, err
}

// injectIn is Inject once the object's namespace is known to be in scope.
func (i *Injector) injectIn(ctx context.Context, req Request, adapter *jobs.Adapter, nsAnn map[string]string) (Result, error) {
	job, err := adapter.Decode(req.Raw)
	if err != nil {
		return Result{}, err
	}
	if adapter.NotMutated != nil {
		if reason := adapter.NotMutated(job); reason != "" {
			return Result{Skipped: reason}, nil
		}
	}
	if skip := policy.OptOut(job.Meta().Annotations); skip != "" {
		return Result{Skipped: adapter.GVK.Kind + ": " + skip}, nil
	}
	base, err := baseline(adapter, job, req.Raw)
	if err != nil {
		return Result{}, err
	}
	p, warnings, skip, err := i.resolvePolicy(ctx, adapter, job, nsAnn, req.Namespace)
	if err != nil || skip != "" {
		return Result{Skipped: skip}, err
	}
	var more []string
	if adapter.Pod != nil {
		pod := adapter.Pod(job)
		more, skip, err = mutators.MutatePod(mutators.PodRequest{Pod: pod, Policy: p, Kinds: i.kinds(), Record: i.fromRecord(ctx, pod, req.Namespace)})
	} else {
		more = mutators.MutateJob(job, adapter, p)
	}
	if err != nil || skip != "" {
		return Result{Skipped: skip}, err
	}
	ops, err := admissionio.TypedDiff(&i.types, req.Raw, base.Object(), job.Object())
	if err != nil {
		return Result{}, fmt.Errorf("diffing mutated %s: %w", adapter.GVK.Kind, err)
	}
	return Result{Patch: ops, Warnings: append(warnings, more...)}, nil
}

// baseline is an untouched copy of job to diff against: a deep copy for a
// Pod (cheaper than decoding), else a second decode (the local job types
// have no generated DeepCopy).
func baseline(adapter *jobs.Adapter, job jobs.Job, raw []byte) (jobs.Job, error) {
	if adapter.Pod != nil {
		return jobs.PodJob{Pod: adapter.Pod(job).DeepCopy()}, nil
	}
	return adapter.Decode(raw)
}
