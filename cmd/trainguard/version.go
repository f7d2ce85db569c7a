package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/trainguard/trainguard/internal/foundations/version"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print trainguard's release (the chart's appVersion and the image tag) and commit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String())
			return err
		},
	}
}
