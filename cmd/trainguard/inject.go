package main

import (
	"bytes"
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/objdiff"
	"github.com/trainguard/trainguard/webhook"
)

func newInjectCmd() *cobra.Command {
	var files inputFlags
	var configPath string
	var diff bool
	cmd := &cobra.Command{
		Use:   "inject -f FILE [-f FILE|DIR ...] [-R] [--diff]",
		Short: "Mutate YAML documents offline as the webhook would in an opted-in namespace",
		Long: `inject reads one or more YAML documents and writes them to stdout, mutated
exactly as the mutating webhook would for a namespace that has opted in
(the same code path). Documents trainguard does not handle, and comments
between documents, pass through unchanged. Policy comes from --config and
from the objects' own trainguard.io/ annotations; a Namespace document
anywhere in the input supplies namespace-level annotations for the objects
in it (a Namespace annotated trainguard.io/inject=disabled leaves them
unchanged).

Before anything is written, every document is checked as
'trainguard validate' checks it: if any is invalid (a wrong type, an
unknown field or trainguard.io/ key, an apiVersion no cluster serves, an
invalid elastic policy), its errors go to stderr, nothing goes to stdout,
and inject exits 1. Warnings go to stderr, and so does, for every object
left unchanged, the reason.

--diff prints, instead of the documents, what would change in each object,
one field a line: "+ spec.containers[pytorch].lifecycle.preStop: ..." (added),
"~ spec.terminationGracePeriodSeconds: 30 -> 90" (changed), "- ..." (removed).

Exit status: 0 written, 1 invalid input (nothing written), 2 unreadable
input (empty, binary, missing) or bad usage.`,
		Example: `  trainguard inject -f job.yaml | kubectl apply -f -
  kubectl get pytorchjob my-job -o yaml | trainguard inject -f - --config policy.yaml
  trainguard inject -f job.yaml --diff`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(configPath, cmd.ErrOrStderr())
			if err != nil {
				return exitWith(2, "inject: "+err.Error())
			}
			in, err := files.read(cmd.InOrStdin())
			if err != nil {
				return exitWith(2, "inject: "+err.Error())
			}
			return runInject(cmd, cfg, in, diff)
		},
	}
	files.bind(cmd.Flags(), "YAML file to mutate")
	// No backquotes in a usage string: pflag takes a backquoted word as the
	// flag's placeholder.
	cmd.Flags().StringVar(&configPath, "config", "", "policy file (the format 'trainguard serve --config' reads); defaults apply when empty")
	cmd.Flags().BoolVar(&diff, "diff", false, "print the field-level changes of each object instead of the documents")
	return cmd
}

// runInject refuses what validate refuses, then mutates.
func runInject(cmd *cobra.Command, cfg *configv1alpha1.Configuration, in *input, diff bool) error {
	invalid := 0
	for _, report := range newChecker(cfg, in).all() {
		// Both webhooks' warnings reach the user online too; the checker
		// has them all, in validate's format, and its errors go to stderr
		// since stdout is the mutated output.
		if err := printReport(cmd.ErrOrStderr(), cmd.ErrOrStderr(), report); err != nil {
			return err
		}
		if len(report.errors) > 0 {
			invalid++
		}
	}
	if invalid > 0 {
		return exitWith(1, fmt.Sprintf("inject: %d invalid object(s) in %s; nothing written", invalid, in.path))
	}
	off := webhook.NewOffline(cfg)
	off.SetNamespaces(namespacesIn(in.docs))
	if diff {
		return diffDocuments(cmd, off, in.docs)
	}
	return injectDocuments(cmd, off, in.docs)
}

func injectDocuments(cmd *cobra.Command, off *webhook.Offline, docs [][]byte) error {
	var out bytes.Buffer
	written := 0
	for n, doc := range docs {
		mutated := doc
		if isEmptyDocument(doc) {
			// Comments between documents are kept; a bare separator is not.
			if len(bytes.TrimSpace(bytes.ReplaceAll(doc, []byte("---"), nil))) == 0 {
				continue
			}
		} else {
			var err error
			// The checker printed the warnings already.
			mutated, _, err = off.InjectDocument(cmd.Context(), doc)
			if err != nil {
				return exitWith(2, fmt.Sprintf("inject: document %d: %v", n+1, err))
			}
		}
		if written > 0 {
			out.WriteString("---\n")
		}
		out.Write(bytes.TrimLeft(mutated, "\n"))
		if !bytes.HasSuffix(mutated, []byte("\n")) {
			out.WriteByte('\n')
		}
		written++
	}
	_, err := cmd.OutOrStdout().Write(out.Bytes())
	return err
}

// diffDocuments prints, per object inject would change, its changes one
// field a line (objdiff, what `make demo` prints too).
func diffDocuments(cmd *cobra.Command, off *webhook.Offline, docs [][]byte) error {
	var out bytes.Buffer
	for n, doc := range docs {
		if isEmptyDocument(doc) {
			continue
		}
		mutated, _, err := off.InjectDocument(cmd.Context(), doc)
		if err != nil {
			return exitWith(2, fmt.Sprintf("inject: document %d: %v", n+1, err))
		}
		var before, after map[string]any
		if yaml.Unmarshal(doc, &before) != nil || yaml.Unmarshal(mutated, &after) != nil {
			continue // not a mapping: passed through unchanged
		}
		changes := objdiff.Diff(before, after)
		if len(changes) == 0 {
			continue
		}
		fmt.Fprintf(&out, "%s:\n", diffName(before, n))
		for _, c := range changes {
			fmt.Fprintf(&out, "  %s\n", objdiff.Render(c, c.Path))
		}
	}
	_, err := cmd.OutOrStdout().Write(out.Bytes())
	return err
}

// diffName is Kind/namespace/name, as every command names an object.
func diffName(obj map[string]any, n int) string {
	kind, _ := obj["kind"].(string)
	return documentName(kind, obj, fmt.Sprintf("document %d", n+1))
}
