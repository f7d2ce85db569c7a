// Command trainguard is the admission webhook server (serve) and its offline
// counterparts (inject, validate).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		var coded exitCoder
		if errors.As(err, &coded) {
			if msg := coded.Error(); msg != "" {
				fmt.Fprintln(os.Stderr, "error:", msg)
			}
			os.Exit(coded.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "trainguard",
		Short: "Fault tolerance for PyTorch training jobs on Kubernetes, injected at admission",
		Long: `trainguard is a Kubernetes admission webhook. In namespaces annotated
trainguard.io/inject=enabled it injects checkpoint-on-termination hooks,
checkpoint volumes, the TaskD port, recover-strategy annotations and GPU
defaults into PyTorchJobs (kubeflow.org and KubeDL), the pods of Kubeflow
Trainer v2 TrainJobs, and training pods of any other controller; refuses
invalid elastic policies, TrainJobs and runtimes; and reschedules training
pods away from failed nodes.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd(), newInjectCmd(), newValidateCmd(), newVersionCmd())
	return root
}
