//go:build tools

// Package tools pins k8s.io/kubernetes so `go build` of the node and
// control-plane components `make cluster` runs resolves (kube-apiserver has
// its own module; these are the rest of a real cluster plus kubectl).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
