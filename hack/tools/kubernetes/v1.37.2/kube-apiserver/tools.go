//go:build tools

// Package tools pins k8s.io/kubernetes so `go build k8s.io/kubernetes/cmd/kube-apiserver` resolves.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
