package main

import "github.com/spf13/cobra"

// newValidateCmd is replaced by the validating-webhook work (issue 3).
func newValidateCmd() *cobra.Command {
	return &cobra.Command{Use: "validate", Short: "Validate YAML documents offline as the validating webhook would"}
}
