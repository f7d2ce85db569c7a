package rescheduler

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// NodeLeaseNamespace is where every kubelet renews its node's Lease (every
// 10 s by default), the heartbeat the node lifecycle controller reads.
const NodeLeaseNamespace = corev1.NamespaceNodeLease

// leaseCheckInterval is how often the leader looks at the node Leases.
const leaseCheckInterval = 2 * time.Second

// leases tracks how long each node's kubelet has been silent: the time since
// this process last saw the node's Lease renewed. Like the node lifecycle
// controller it measures on its own clock, from when it observed a renewal,
// never from the renewTime the kubelet wrote: a node whose clock is behind
// must not look dead. A Lease first seen counts as renewed then, so a
// restart of trainguard (or a new leader) never acts on old silence.
type leases struct {
	mu    sync.Mutex
	clock clock.PassiveClock
	seen  map[string]observation
}

type observation struct {
	renew metav1.MicroTime // the Lease's renewTime when last seen changed
	at    time.Time        // when this process saw that change
	told  bool             // the node's pods were enqueued for this silence
}

func newLeases(clk clock.PassiveClock) *leases {
	return &leases{clock: clk, seen: map[string]observation{}}
}

// observe records the Lease's renewTime and says whether the node has just
// gone silent for at least lostAfter (true once per silence).
func (l *leases) observe(lease *coordinationv1.Lease, lostAfter time.Duration) bool {
	var renew metav1.MicroTime
	if lease.Spec.RenewTime != nil {
		renew = *lease.Spec.RenewTime
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.seen[lease.Name]
	if !ok || !o.renew.Equal(&renew) {
		l.seen[lease.Name] = observation{renew: renew, at: now}
		return false
	}
	if o.told || now.Sub(o.at) < lostAfter {
		return false
	}
	o.told = true
	l.seen[lease.Name] = o
	return true
}

// silentFor is how long the node's kubelet has not renewed its Lease as this
// process saw it; ok is false when no Lease of the node has been seen.
func (l *leases) silentFor(node string) (time.Duration, bool) {
	if l == nil {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.seen[node]
	if !ok {
		return 0, false
	}
	return l.clock.Now().Sub(o.at), true
}

// seenRenew is what this process last saw of a node's Lease.
type seenRenew struct {
	renew  metav1.MicroTime
	silent time.Duration
}

// lastRenew is the renewTime last seen of node's Lease and how long ago
// that was; ok is false when no Lease of the node has been seen.
func (l *leases) lastRenew(node string) (seenRenew, bool) {
	if l == nil {
		return seenRenew{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.seen[node]
	if !ok {
		return seenRenew{}, false
	}
	return seenRenew{renew: o.renew, silent: l.clock.Now().Sub(o.at)}, true
}

// renewed records a renewal read from the API server that the cache had
// not delivered: the node counts as renewed now.
func (l *leases) renewed(node string, renew metav1.MicroTime) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[node] = observation{renew: renew, at: l.clock.Now()}
}

// silentCount is how many of the Leases seen have been silent for at
// least lostAfter, and how many were seen.
func (l *leases) silentCount(lostAfter time.Duration) (silent, total int) {
	if l == nil {
		return 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	for _, o := range l.seen {
		if now.Sub(o.at) >= lostAfter {
			silent++
		}
	}
	return silent, len(l.seen)
}

// restart counts the nodes' Leases last seen renewed before covered
// as renewed now (a brake that covered their silence released) and
// returns the nodes restarted.
func (l *leases) restart(nodes map[string]bool, covered time.Time) map[string]bool {
	restarted := map[string]bool{}
	if l == nil {
		return restarted
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	for name, o := range l.seen {
		if nodes[name] && o.at.Before(covered) {
			l.seen[name] = observation{renew: o.renew, at: now}
			restarted[name] = true
		}
	}
	return restarted
}

// forget drops Leases that are gone (their node was deleted).
func (l *leases) forget(present map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name := range l.seen {
		if !present[name] {
			delete(l.seen, name)
		}
	}
}

// leaseWatcher runs on the leader: every leaseCheckInterval it reads the
// node Leases (cached) and enqueues the managed pods of a node that has just
// gone silent for --lease-lost-after. Silence produces no event of its own,
// so it has to be looked for.
type leaseWatcher struct {
	r      *Reconciler
	events chan event.GenericEvent
}

func (w *leaseWatcher) NeedLeaderElection() bool { return true }

func (w *leaseWatcher) Start(ctx context.Context) error {
	t := time.NewTicker(leaseCheckInterval)
	defer t.Stop()
	for {
		w.check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (w *leaseWatcher) check(ctx context.Context) {
	var list coordinationv1.LeaseList
	if err := w.r.client.List(ctx, &list, client.InNamespace(NodeLeaseNamespace)); err != nil {
		log.FromContext(ctx).Error(err, "reading node Leases; nodes are judged by their Ready condition only")
		return
	}
	present := make(map[string]bool, len(list.Items))
	for i := range list.Items {
		lease := &list.Items[i]
		present[lease.Name] = true
		if w.r.leases.observe(lease, w.r.opts.LeaseLostAfter.Duration) {
			log.FromContext(ctx).Info("node's kubelet went silent", "node", lease.Name, "silentFor", w.r.opts.LeaseLostAfter.Duration)
			select {
			case w.events <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: lease.Name}}}:
			case <-ctx.Done():
				return
			}
		}
	}
	w.r.leases.forget(present)
	w.r.brakes.release(ctx)
}

// TransformLease keeps what the rescheduler reads of a Lease: its name and
// renewTime (the holder identity and the rest are dropped before caching).
func TransformLease(obj any) (any, error) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	out := &coordinationv1.Lease{TypeMeta: lease.TypeMeta}
	out.Name, out.Namespace, out.UID, out.ResourceVersion = lease.Name, lease.Namespace, lease.UID, lease.ResourceVersion
	out.Spec.RenewTime = lease.Spec.RenewTime
	return out, nil
}
