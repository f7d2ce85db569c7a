//go:build tools

// Package tools pins Prometheus so `go build github.com/prometheus/prometheus/cmd/promtool` resolves.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
