package rescheduler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/mutators"
)

// BadNodeStore is the pod webhook's view of the bad-node records. It reads
// the job's ConfigMap through the manager's cache, so admission never waits
// on the API server.
type BadNodeStore struct {
	reader client.Reader
	clock  clock.PassiveClock
	max    int
}

var _ mutators.NodeAvoider = (*BadNodeStore)(nil)

// NewBadNodeStore returns the NodeAvoider the pod webhook uses; r is the
// manager's cache reader. With the rescheduler disabled nothing records bad
// nodes, so the store avoids none and never reads (no ConfigMap informer).
func NewBadNodeStore(r client.Reader, opts Options) mutators.NodeAvoider {
	if !opts.Enabled {
		return noAvoider{}
	}
	return newBadNodeStore(r, opts, clock.RealClock{})
}

func newBadNodeStore(r client.Reader, opts Options, clk clock.PassiveClock) *BadNodeStore {
	return &BadNodeStore{reader: r, clock: clk, max: opts.MaxBadNodes}
}

// AvoidNodes returns the unexpired bad nodes of the pod's job, sorted, at
// most MaxBadNodes. A job without a record avoids nothing.
func (s *BadNodeStore) AvoidNodes(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	key := JobKeyOf(pod)
	if key.Namespace == "" || key.Name == "" {
		// A bare pod with generateName has no identity yet, hence no record.
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.RecordName()}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading bad-node record of %s: %w", key, err)
	}
	if cm.Labels[LabelBadNodes] != "true" {
		// Not ours: a user's ConfigMap that happens to have the name.
		return nil, nil
	}
	rec, err := decodeRecord(cm)
	if err != nil {
		return nil, err
	}
	return rec.Active(s.clock.Now(), s.max), nil
}

type noAvoider struct{}

func (noAvoider) AvoidNodes(context.Context, *corev1.Pod) ([]string, error) { return nil, nil }
