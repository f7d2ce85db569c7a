package contract

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateMetadata checks the trainguard.io/ and MindCluster annotations
// and labels of one object or pod template: unknown trainguard.io/ keys,
// the per-key rules and MindCluster's fault-scheduling label. fldPath is
// the path of the metadata (metadata, or …template.metadata). Every
// validator and every kind's adapter calls this one function, so they can
// never disagree on what is valid.
func ValidateMetadata(meta *metav1.ObjectMeta, fldPath *field.Path) field.ErrorList {
	if meta == nil {
		return nil
	}
	errs := unknownKeys(meta.Annotations, knownAnnotations(), "annotation", fldPath.Child("annotations"))
	errs = append(errs, ValidateAnnotations(meta.Annotations, fldPath.Child("annotations"))...)
	errs = append(errs, unknownKeys(meta.Labels, KnownLabels(), "label", fldPath.Child("labels"))...)
	return append(errs, ValidateFaultSchedulingLabel(meta.Labels, fldPath.Child("labels"))...)
}

// unknownKeys refuses every trainguard.io/ key in m that trainguard does
// not know: a typo (trainguard.io/gpu-limt) would otherwise be ignored and
// the default silently apply. The message names the nearest known key.
// what is "annotation" or "label"; fldPath is the map's path.
func unknownKeys(m map[string]string, known []string, what string, fldPath *field.Path) field.ErrorList {
	// Only the unknown keys are collected and sorted: the usual object has
	// none, and this runs for every template of every admission.
	var unknown []string
	for key := range m {
		if strings.HasPrefix(key, Prefix) && !slices.Contains(known, key) {
			unknown = append(unknown, key)
		}
	}
	slices.Sort(unknown)
	var errs field.ErrorList
	for _, key := range unknown {
		msg := fmt.Sprintf("unknown %s %s", Prefix, what)
		if near := Nearest(key, known); near != "" {
			msg += fmt.Sprintf("; did you mean %s?", near)
		} else {
			msg += fmt.Sprintf("; the known ones are %s", strings.Join(known, ", "))
		}
		errs = append(errs, field.Invalid(fldPath.Key(key), key, msg))
	}
	return errs
}

// Nearest returns the candidate closest to s by edit distance (case
// ignored), or "" when none is close enough to be a likely typo.
func Nearest(s string, candidates []string) string {
	best, bestDist := "", -1
	limit := max(2, len(s)/4)
	for _, c := range candidates {
		if len(s)-len(c) > limit || len(c)-len(s) > limit {
			continue // cannot be close enough; spares a long key the quadratic distance
		}
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if bestDist < 0 || d < bestDist || (d == bestDist && c < best) {
			best, bestDist = c, d
		}
	}
	if bestDist < 0 || bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
