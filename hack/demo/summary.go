package main

import (
	"fmt"
	"github.com/trainguard/trainguard/internal/foundations/objdiff"
	"io"
	"regexp"
	"strings"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

var replicaPath = regexp.MustCompile(`^spec\.pytorchReplicaSpecs\.([A-Za-z]+)\.template(?:\.(.*))?$`)

// printSummary writes what happened to every object and returns what was
// not as expected (empty when the demo passed).
func printSummary(w io.Writer, results []*result) []string {
	var problems []string
	for _, r := range results {
		d := r.doc
		fmt.Fprintf(w, "%s  (%s, %s)\n", r.ref(), d.obj.GetAPIVersion(), shortPath(d.file))
		switch {
		case d.expectRejected && r.refusal == nil:
			fmt.Fprintln(w, "  UNEXPECTED: admitted, but it is invalid and must be refused")
			problems = append(problems, r.ref()+" was admitted")
		case d.expectRejected:
			fmt.Fprintln(w, "  refused by the API server, as expected:")
			fmt.Fprintf(w, "    %s\n", indent(r.refusal.Error(), "    "))
			if !strings.Contains(r.refusal.Error(), "trainguard.io") {
				problems = append(problems, r.ref()+" was refused, but not by a trainguard webhook")
			}
		case r.refusal != nil:
			fmt.Fprintln(w, "  UNEXPECTED: refused:")
			fmt.Fprintf(w, "    %s\n", indent(r.refusal.Error(), "    "))
			problems = append(problems, r.ref()+" was refused")
		case !r.workload:
			fmt.Fprintf(w, "  %s\n", r.note)
			if strings.Contains(r.note, "did not") {
				problems = append(problems, r.ref()+": "+r.note)
			}
		default:
			fmt.Fprintf(w, "  admitted; %s: %s\n", contract.AnnotationInjected, orNone(r.injected))
			if r.injected == "" || len(r.changes) == 0 {
				problems = append(problems, r.ref()+" was not injected")
			}
			printChanges(w, r)
		}
		for _, warning := range r.warnings {
			fmt.Fprintf(w, "  warning: %s\n", warning)
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "Summary")
	for _, r := range results {
		var status string
		switch {
		case r.refusal != nil && r.doc.expectRejected:
			status = "refused (expected)"
		case r.refusal != nil:
			status = "REFUSED"
		case r.doc.expectRejected:
			status = "ADMITTED (expected a refusal)"
		case r.workload && r.injected == "":
			status = "NOT INJECTED"
		case r.workload:
			status = "injected: " + r.injected
		default:
			status = r.note
		}
		if len(r.warnings) > 0 {
			status += fmt.Sprintf(" (%d warning%s)", len(r.warnings), map[bool]string{true: "s"}[len(r.warnings) > 1])
		}
		fmt.Fprintf(w, "  %-58s %s\n", r.ref(), status)
	}
	fmt.Fprintln(w)
	return problems
}

// printChanges lists the changes per part of the object: the object itself,
// then each replica's pod template; replicas with the same changes share one list.
func printChanges(w io.Writer, r *result) {
	self := "pod"
	if r.doc.obj.GetKind() != "Pod" {
		self = "job"
	}
	type group struct {
		labels []string
		lines  []string
	}
	var groups []*group
	index := map[string]*group{}
	add := func(label, line string) {
		g, ok := index[label]
		if !ok {
			g = &group{labels: []string{label}}
			index[label] = g
			groups = append(groups, g)
		}
		g.lines = append(g.lines, line)
	}
	for _, c := range r.changes {
		label, path := self, c.Path
		if m := replicaPath.FindStringSubmatch(c.Path); m != nil {
			label, path = m[1]+" pod template", m[2]
			if path == "" {
				path = "."
			}
		}
		add(label, objdiff.Render(c, path))
	}
	// Merge groups whose changes are identical (Master and Worker usually are).
	var merged []*group
	byLines := map[string]*group{}
	for _, g := range groups {
		key := strings.Join(g.lines, "\n")
		if m, ok := byLines[key]; ok {
			m.labels = append(m.labels, g.labels...)
			continue
		}
		byLines[key] = g
		merged = append(merged, g)
	}
	for _, g := range merged {
		label := strings.Join(g.labels, ", ")
		if len(g.labels) > 1 {
			label = strings.Replace(strings.Join(g.labels, " / "), " pod template /", " /", len(g.labels)-1)
		}
		fmt.Fprintf(w, "  %s:\n", label)
		for _, l := range g.lines {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

func indent(s, prefix string) string {
	return strings.ReplaceAll(s, "\n", "\n"+prefix)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// shortPath shortens an examples path to examples/demo/<file>.
func shortPath(p string) string {
	if i := strings.LastIndex(p, "examples/"); i >= 0 {
		return p[i:]
	}
	return p
}

// demoNamespace is the first namespace the examples created, for the kubectl hint.
func demoNamespace(results []*result) string {
	for _, r := range results {
		if r.doc.obj.GetKind() == "Namespace" {
			return r.doc.obj.GetName()
		}
	}
	return "default"
}
