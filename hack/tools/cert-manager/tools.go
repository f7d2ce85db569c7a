//go:build tools

// Package tools pins cert-manager so `go build` of its three commands resolves.
package tools

import (
	_ "github.com/cert-manager/cert-manager/cmd/cainjector"
	_ "github.com/cert-manager/cert-manager/cmd/controller"
	_ "github.com/cert-manager/cert-manager/cmd/webhook"
)
