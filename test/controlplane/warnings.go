package controlplane

import (
	"context"
	"sync"

	"k8s.io/client-go/rest"
)

// Warnings records the Warning headers the API server relays to a client
// (admission warnings among them). Install it with WithWarnings.
type Warnings struct {
	mu   sync.Mutex
	list []string
}

// HandleWarningHeaderWithContext implements rest.WarningHandlerWithContext.
func (w *Warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// Take returns the warnings recorded since the last Take.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// WithWarnings returns a copy of cfg whose clients report warnings to a new recorder.
func WithWarnings(cfg *rest.Config) (*rest.Config, *Warnings) {
	rec := &Warnings{}
	out := rest.CopyConfig(cfg)
	out.WarningHandler, out.WarningHandlerWithContext = nil, rec
	return out, rec
}
