package contract

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// rule is one row of the annotation table: the key, and how a value is
// parsed into a change of the effective Policy. apply is nil for keys that
// are only validated (the opt-in switch, MindCluster's own annotation).
// One row serves both callers: Policy.Overlay applies it, ValidateAnnotations
// refuses what it rejects, so "valid" and "applied" cannot drift apart.
type rule struct {
	key   string
	parse func(v string) (apply func(*Policy), err error)
	// checkOnly rows are validated but never layered into a Policy.
	checkOnly bool
	// objectOnly rows apply only from the object's own annotations: a
	// namespace-wide value would make every job in it share one thing.
	objectOnly string
}

// annotationTable lists every annotation trainguard owns. Adding a key is
// one row here (plus its parser in parse.go when it needs a new one). It
// is built once: every admitted object looks its annotations up in it.
var annotationTable = sync.OnceValue(buildAnnotationTable) // immutable after its one build, like a constant table.

func buildAnnotationTable() []rule {
	return []rule{
		{key: AnnotationInject, parse: onlyCheck(ParseTaskD), checkOnly: true},
		{key: AnnotationCheckpointClaim, parse: set(ParseCheckpointClaim, func(p *Policy, v string) { p.CheckpointClaim = v })},
		{key: AnnotationCheckpointPath, parse: set(ParseCheckpointPath, func(p *Policy, v string) { p.CheckpointPath = v })},
		{key: AnnotationCheckpointKey, parse: set(ParseCheckpointKey, func(p *Policy, v string) { p.CheckpointKey = v }),
			objectOnly: "only a job or a pod may name its checkpoint directory (a namespace-wide key would make every job share one)"},
		{key: AnnotationRecoverStrategy, parse: set(ParseRecoverStrategy, func(p *Policy, v string) { p.RecoverStrategy = v })},
		{key: AnnotationFaultScheduling, parse: set(ParseFaultScheduling, func(p *Policy, v string) { p.FaultScheduling = v })},
		// An explicit gpu-limit asks for the default on every training
		// container, CPU jobs included (GPUForAll; mutators/gpu.go).
		{key: AnnotationGPULimit, parse: set(ParseGPULimit, func(p *Policy, n int64) { p.GPUCount, p.GPUForAll = n, true })},
		{key: AnnotationTaskD, parse: set(ParseTaskD, func(p *Policy, on bool) { p.TaskD = on })},
		{key: AnnotationPreStopTimeout, parse: set(ParsePreStopTimeout, func(p *Policy, d time.Duration) { p.PreStopTimeout = d })},
		{key: AnnotationCheckpointInterval, parse: set(ParseCheckpointInterval, func(p *Policy, d time.Duration) { p.CheckpointInterval = d })},
		{key: AnnotationMaxReschedules, parse: set(ParseMaxReschedules, func(p *Policy, n int) { p.MaxReschedules = n })},
		// A layer can only tighten it: "false" on a job never lifts the namespace's "true".
		{key: AnnotationRequireDurableCheckpoints, parse: set(ParseRequireDurable, func(p *Policy, on bool) { p.RequireDurableCheckpoints = p.RequireDurableCheckpoints || on })},
		{key: AnnotationInProcessRecovery, parse: set(ParseTaskD, func(p *Policy, on bool) { p.InProcessRecovery = on })},
		{key: AnnotationMindClusterRecoverStrategy, parse: onlyCheck(ParseRecoverStrategy), checkOnly: true},
		// Read from the Namespace only (Audited); an object's is ignored.
		{key: AnnotationAdmissionMode, parse: onlyCheck(ParseAdmissionMode), checkOnly: true},
	}
}

// set builds a table row's parse from a typed parser and a setter.
func set[T any](parse func(string) (T, error), assign func(*Policy, T)) func(string) (func(*Policy), error) {
	return func(v string) (func(*Policy), error) {
		x, err := parse(v)
		if err != nil {
			return nil, err
		}
		return func(p *Policy) { assign(p, x) }, nil
	}
}

// onlyCheck builds a row that validates but changes no policy.
func onlyCheck[T any](parse func(string) (T, error)) func(string) (func(*Policy), error) {
	return func(v string) (func(*Policy), error) {
		_, err := parse(v)
		return nil, err
	}
}

// lookup returns the row for key, or false for a key trainguard does not own.
func lookup(key string) (rule, bool) {
	for _, r := range annotationTable() {
		if r.key == key {
			return r, true
		}
	}
	return rule{}, false
}

// Overlay applies one layer of annotations (what names it in warnings:
// "namespace" or "object") in a fixed key order, so warnings are
// deterministic. A bad value never silently disappears: it is skipped, the
// lower layer applies, and a warning names the annotation, the value and
// the reason.
func (p *Policy) Overlay(what string, ann map[string]string) []string {
	var warnings []string
	for _, key := range sortedKeys(ann) {
		if !strings.HasPrefix(key, Prefix) {
			continue
		}
		r, ok := lookup(key)
		if !ok || r.checkOnly {
			continue
		}
		apply, err := r.parse(ann[key])
		if err == nil && r.objectOnly != "" && what != "object" {
			err = errors.New(r.objectOnly)
		}
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s annotation %s=%q ignored: %v; the default applies", what, key, ann[key], err))
			continue
		}
		apply(p)
	}
	return warnings
}

// ValidateAnnotations checks every trainguard and MindCluster annotation in
// ann. fldPath is the path of the annotations map (e.g. metadata.annotations).
func ValidateAnnotations(ann map[string]string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, key := range sortedKeys(ann) {
		r, ok := lookup(key)
		if !ok {
			continue
		}
		if _, err := r.parse(ann[key]); err != nil {
			errs = append(errs, field.Invalid(fldPath.Key(key), ann[key], err.Error()))
		}
	}
	return errs
}

// PolicyAnnotations returns, sorted, the trainguard.io/ keys in ann that
// change the injected policy (checkpoint-claim, gpu-limit, …). Such a key is
// a clear request for trainguard, so a pod carrying one is treated as opted
// in even without a training-named container.
func PolicyAnnotations(ann map[string]string) []string {
	var keys []string
	for _, r := range annotationTable() {
		if _, ok := ann[r.key]; ok && !r.checkOnly {
			keys = append(keys, r.key)
		}
	}
	sort.Strings(keys)
	return keys
}

// sortedKeys returns ann's keys in order with one allocation (this runs for
// every admitted object).
func sortedKeys(ann map[string]string) []string {
	keys := slices.AppendSeq(make([]string, 0, len(ann)), maps.Keys(ann))
	slices.Sort(keys)
	return keys
}
