//go:build tools

// Package tools pins Kubeflow Trainer v2 and JobSet for hack/build-trainer.sh,
// so `go build` of their controller managers resolves to exact versions.
package tools

import (
	_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
	_ "sigs.k8s.io/jobset"
)
