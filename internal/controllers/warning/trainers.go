package warning

import (
	"context"

	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
)

// Trainers reaches the trainers of training pods at their pod IPs (the
// status port, contract.StatusPort): what this controller needs of the
// trainer's checkpoint-now request and status document.
type Trainers interface {
	// RequestCheckpoint asks the pod's trainer to commit the next
	// completed step and train on; it returns the step acknowledged (the
	// commit is a step at or after it). ErrRateLimited: the trainer
	// committed on request too recently and refused.
	RequestCheckpoint(ctx context.Context, podIP, reason string) (step int64, err error)
	// Status reads the trainer's status: its step and last committed step
	// (nil: none yet).
	Status(ctx context.Context, podIP string) (step int64, committed *int64, err error)
}

// ErrRateLimited is a trainer's refusal of a request that came within its
// own interval (HTTP 429): the trainer status client's own error.
var ErrRateLimited = trainerstatus.ErrRateLimited

// TrainerFuncs is Trainers from two functions: the process wires the
// trainer status client's requester and fetcher into them.
type TrainerFuncs struct {
	Request func(ctx context.Context, podIP, reason string) (int64, error)
	Read    func(ctx context.Context, podIP string) (step int64, committed *int64, err error)
}

// RequestCheckpoint calls Request.
func (f TrainerFuncs) RequestCheckpoint(ctx context.Context, podIP, reason string) (int64, error) {
	return f.Request(ctx, podIP, reason)
}

// Status calls Read.
func (f TrainerFuncs) Status(ctx context.Context, podIP string) (int64, *int64, error) {
	return f.Read(ctx, podIP)
}
