package main

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
)

// ctrlContext stops the manager on SIGTERM/SIGINT as well as when ctx ends.
func ctrlContext(ctx context.Context) context.Context {
	sig := ctrl.SetupSignalHandler()
	merged, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-sig.Done():
		case <-ctx.Done():
		}
		cancel()
	}()
	return merged
}
