// Command trainguard-agent runs inside training pods: `install DIR` (init
// container) and `prestop` (the training container's preStop hook). See
// package agent and docs/checkpoint-protocol.md.
package main

import (
	"os"

	"github.com/trainguard/trainguard/internal/agent"
)

func main() {
	os.Exit(agent.Run(os.Args[1:], os.Getenv, os.Stderr))
}
