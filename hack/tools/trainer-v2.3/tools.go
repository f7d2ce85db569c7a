//go:build tools

// Package tools pins Kubeflow Trainer v2.3.0 and JobSet v0.12.0, the newest
// releases the Go module proxy serves: the controllers `make cluster` runs
// and `make test-trainer` runs besides v2.0.0/v0.8.2 (hack/tools/trainer).
// hack/build-trainer.sh builds them from this module.
package tools

import (
	_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
	_ "sigs.k8s.io/jobset"
)
