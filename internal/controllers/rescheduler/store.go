package rescheduler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/jobs"
)

// BadNodeStore is the pod webhook's view of the bad-node records. It reads
// the job's record from trainguard's own namespace through the manager's
// cache (which holds ConfigMaps of that namespace only), so admission never
// waits on the API server and nothing a tenant writes is ever read.
type BadNodeStore struct {
	reader    client.Reader
	clock     clock.PassiveClock
	max       int
	namespace string
	kinds     jobs.Kinds
}

var _ podspec.NodeAvoider = (*BadNodeStore)(nil)

// NewBadNodeStore returns the NodeAvoider the pod webhook uses; r is the
// manager's cache reader. With the rescheduler disabled nothing records bad
// nodes, so the store avoids none and never reads (no ConfigMap informer).
// namespace is trainguard's own, where the records live; kinds find a
// pod's job.
func NewBadNodeStore(r client.Reader, opts Options, kinds jobs.Kinds, namespace string) podspec.NodeAvoider {
	if !*opts.Enabled {
		return noAvoider{}
	}
	return newBadNodeStore(r, opts, kinds, namespace, clock.RealClock{})
}

func newBadNodeStore(r client.Reader, opts Options, kinds jobs.Kinds, namespace string, clk clock.PassiveClock) *BadNodeStore {
	return &BadNodeStore{reader: r, clock: clk, max: opts.MaxBadNodes, namespace: namespace, kinds: kinds}
}

// AvoidNodes returns how a new pod of the job avoids its unexpired bad
// nodes (Record.Avoid), sorted, at most MaxBadNodes. A job without a valid
// record avoids nothing: a broken record must not block admission (the
// rescheduler reports it).
func (s *BadNodeStore) AvoidNodes(ctx context.Context, pod *corev1.Pod) (podspec.Avoid, error) {
	rec, ok, err := s.record(ctx, pod)
	if !ok || err != nil {
		return podspec.Avoid{}, err
	}
	return rec.Avoid(s.clock.Now(), s.max), nil
}

// InPlaceStopped says the job's record stops its in-place restarts. A job
// without a valid record is not stopped (the rules are injected as before).
func (s *BadNodeStore) InPlaceStopped(ctx context.Context, pod *corev1.Pod) (bool, error) {
	rec, ok, err := s.record(ctx, pod)
	return ok && rec.InPlaceStopped, err
}

// record reads the valid record of the pod's job; ok is false when there
// is none, it is invalid, or it is an earlier job's of the same name.
func (s *BadNodeStore) record(ctx context.Context, pod *corev1.Pod) (Record, bool, error) {
	key := s.kinds.KeyOf(pod)
	if key.Namespace == "" || key.Name == "" {
		// A bare pod with generateName has no identity yet, hence no record.
		return Record{}, false, nil
	}
	cm := &corev1.ConfigMap{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: RecordName(key)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return Record{}, false, nil
		}
		return Record{}, false, fmt.Errorf("reading bad-node record of %s: %w", key, err)
	}
	if cm.Labels[contract.LabelBadNodes] != "true" {
		return Record{}, false, nil
	}
	rec, err := decodeRecord(cm, key)
	if err != nil {
		log.FromContext(ctx).Info("ignoring bad-node record", "job", key.String(), "error", err.Error())
		return Record{}, false, nil
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && rec.JobUID != "" && ref.UID != rec.JobUID {
		return Record{}, false, nil // an earlier job of the same name
	}
	return rec, true, nil
}

type noAvoider struct{}

func (noAvoider) AvoidNodes(context.Context, *corev1.Pod) (podspec.Avoid, error) {
	return podspec.Avoid{}, nil
}

func (noAvoider) InPlaceStopped(context.Context, *corev1.Pod) (bool, error) { return false, nil }
