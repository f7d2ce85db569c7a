package main

import (
	"bytes"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/trainguard/trainguard/webhook"
)

func newInjectCmd() *cobra.Command {
	var file, configPath string
	cmd := &cobra.Command{
		Use:   "inject -f FILE",
		Short: "Mutate YAML documents offline as the webhook would in an opted-in namespace",
		Long: `inject reads one or more YAML documents and writes them to stdout, mutated
exactly as the mutating webhook would for a namespace that has opted in
(the same code path). Documents trainguard does not handle pass through
unchanged. Policy comes from --config and from the objects' own
trainguard.io/ annotations; a Namespace document earlier in the stream
supplies namespace-level annotations for the objects in it.
Warnings go to stderr.`,
		Example: `  trainguard inject -f job.yaml | kubectl apply -f -
  kubectl get pytorchjob my-job -o yaml | trainguard inject -f - --config policy.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return exitWith(2, "inject: -f FILE is required (use -f - for stdin)")
			}
			cfg, err := loadConfig(configPath, cmd.ErrOrStderr())
			if err != nil {
				return exitWith(2, "inject: "+err.Error())
			}
			docs, err := readDocuments(file, cmd.InOrStdin())
			if err != nil {
				return exitWith(2, "inject: "+err.Error())
			}
			return injectDocuments(cmd, webhook.NewOffline(cfg), docs)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "YAML file to mutate, or - for stdin")
	cmd.Flags().StringVar(&configPath, "config", "", "policy file (the format `trainguard serve --config` reads); defaults apply when empty")
	return cmd
}

func injectDocuments(cmd *cobra.Command, off *webhook.Offline, docs [][]byte) error {
	var out bytes.Buffer
	written := 0
	for n, doc := range docs {
		if isEmptyDocument(doc) {
			continue
		}
		mutated, warnings, err := off.InjectDocument(cmd.Context(), doc)
		for _, w := range warnings {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
		}
		if err != nil {
			return exitWith(2, fmt.Sprintf("inject: document %d: %v", n+1, err))
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
