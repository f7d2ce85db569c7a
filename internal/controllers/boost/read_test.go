package boost

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
)

// silentPod is a trainer's status port that accepts every connection and
// never answers: a tenant's pod can do that, on purpose or hung.
type silentPod struct {
	ln       net.Listener
	accepted atomic.Int32
	hungUp   atomic.Int32 // connections the reader closed
	mu       sync.Mutex
	conns    []net.Conn
}

func newSilentPod(t *testing.T) *silentPod {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &silentPod{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go func() { // read the request, answer nothing, note when the reader hangs up
				_, _ = io.Copy(io.Discard, c)
				s.hungUp.Add(1)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
	return s
}

// goodPod serves body as the trainer's status.
func goodPod(t *testing.T, body string) net.Addr {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != contract.StatusPath {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr()
}

// podNet is the pod network of a test: pod IPs (TEST-NET-1, never dialled
// for real) routed to local listeners by the dialler of the real HTTP
// fetcher, so everything but the route is the production path.
type podNet struct {
	mu    sync.Mutex
	route map[string]string // "ip:9602" → local address
	next  int
	reads atomic.Int32
}

func (n *podNet) add(addr net.Addr) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.route == nil {
		n.route = map[string]string{}
	}
	n.next++
	ip := fmt.Sprintf("192.0.2.%d", n.next)
	n.route[net.JoinHostPort(ip, strconv.Itoa(contract.StatusPort))] = addr.String()
	return ip
}

func (n *podNet) fetcher() trainerstatus.Fetcher {
	f := trainerstatus.HTTPFetcherVia(func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.mu.Lock()
		to, ok := n.route[addr]
		n.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("no pod at %s", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, to)
	})
	return func(ctx context.Context, ip string) (trainerstatus.Status, error) {
		n.reads.Add(1)
		return f(ctx, ip)
	}
}

const (
	rank0Body  = `{"format":1,"now":1000,"step":12,"committed_step":10,"committed_at":990,"save_seconds":0.5}`
	workerBody = `{"format":1,"now":1000,"step":12,"committed_step":10,"committed_at":990,"save_seconds":null}`
)

// TestReadStatusIsBoundedByOneDeadline: a job's pods that accept and never
// answer cost one status deadline in all, not one each. Read one after
// another, 8 such pods took 16 s before rank 0 was asked (and the
// controller has two workers for every tenant's Workloads).
func TestReadStatusIsBoundedByOneDeadline(t *testing.T) {
	t.Parallel()
	const silent = 8
	for _, tc := range []struct {
		name string
		last string // the body of the pod read last ("": none)
		// within: the bound on the whole read
		within   time.Duration
		wantBest bool
		wantSave bool
	}{
		// Rank 0's answer is all there is to know: it ends the read at
		// once, and the silent reads are cancelled.
		{"8 silent, then rank 0", rank0Body, statusTimeout, true, true},
		// A worker's answer has no save time; rank 0 might still answer,
		// so the read waits for it, but not past the one deadline.
		{"8 silent, then a worker", workerBody, statusTimeout + time.Second, true, false},
		{"8 silent", "", statusTimeout + time.Second, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pn podNet
			var pods []*silentPod
			var ips []string
			for range silent {
				p := newSilentPod(t)
				pods = append(pods, p)
				ips = append(ips, pn.add(p.ln.Addr()))
			}
			if tc.last != "" {
				ips = append(ips, pn.add(goodPod(t, tc.last)))
			}
			start := time.Now()
			best, errs := readStatus(context.Background(), pn.fetcher(), ips)
			took := time.Since(start)
			assert.Less(t, took, tc.within, "one deadline (%s) for all the pods, not one each", statusTimeout)
			require.Len(t, errs, len(ips))
			for i := range silent {
				assert.Error(t, errs[i], "silent pod %d", i)
			}
			if !tc.wantBest {
				assert.Nil(t, best)
				return
			}
			require.NotNil(t, best)
			assert.NoError(t, errs[silent])
			assert.Equal(t, tc.wantSave, best.SaveSeconds != nil)
			if !tc.wantSave {
				return
			}
			// The silent reads in flight are cancelled, not left to run
			// out their deadline.
			assert.Eventually(t, func() bool {
				for _, p := range pods {
					if p.hungUp.Load() != p.accepted.Load() {
						return false
					}
				}
				return true
			}, statusTimeout/2, 10*time.Millisecond, "every silent pod's connection is closed once rank 0 answered")
		})
	}
}

// TestReadStatusPrefersRank0: of a worker's answer and rank 0's, rank 0's
// (with the save time) is taken, whichever comes first.
func TestReadStatusPrefersRank0(t *testing.T) {
	var pn podNet
	ips := []string{pn.add(goodPod(t, workerBody)), pn.add(goodPod(t, rank0Body))}
	best, errs := readStatus(context.Background(), pn.fetcher(), ips)
	require.NotNil(t, best)
	require.NotNil(t, best.SaveSeconds)
	assert.InDelta(t, 0.5, *best.SaveSeconds, 0)
	assert.NoError(t, errs[1])

	best, errs = readStatus(context.Background(), pn.fetcher(), nil)
	assert.Nil(t, best)
	assert.Empty(t, errs)
}

// TestBoostRemovalReadsNoPod: a Workload that must lose its boost (Kueue
// evicted it, it finished, or it was deactivated) loses it without a pod
// being contacted: its trainers' ports, here all silent, cannot delay it.
func TestBoostRemovalReadsNoPod(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*unstructured.Unstructured)
	}{
		{"evicted", func(wl *unstructured.Unstructured) { addCondition(wl, "Evicted") }},
		{"finished", func(wl *unstructured.Unstructured) { addCondition(wl, "Finished") }},
		// spec.active=false: Kueue evicts it next, and its conditions
		// still say Admitted until it does.
		{"deactivated", func(wl *unstructured.Unstructured) {
			require.NoError(t, unstructured.SetNestedField(wl.Object, false, "spec", "active"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wl := workload("wl", "deaf", true, 100)
			wl.SetAnnotations(map[string]string{Annotation: "100"})
			tc.set(wl)
			var pn podNet
			objs := []client.Object{wl}
			var pods []*silentPod
			for i := range 8 {
				p := newSilentPod(t)
				pods = append(pods, p)
				objs = append(objs, trainingPod(fmt.Sprintf("deaf-%d", i), "deaf", pn.add(p.ln.Addr())))
			}
			r, c := setup(t, true, pn.fetcher(), objs...)
			reconcileOne(t, r, "wl")
			_, ok := boostOf(t, c, "wl")
			assert.False(t, ok, "the boost is removed")
			assert.Zero(t, pn.reads.Load(), "no pod read")
			for i, p := range pods {
				assert.Zero(t, p.accepted.Load(), "pod %d contacted", i)
			}
		})
	}
}

func addCondition(wl *unstructured.Unstructured, typ string) {
	conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	conds = append(conds, map[string]any{"type": typ, "status": "True"})
	_ = unstructured.SetNestedSlice(wl.Object, conds, "status", "conditions")
}

// TestControllerReadsSilentPodsOnce: an admitted job of 8 silent pods and
// rank 0 is judged by rank 0's answer within one deadline.
func TestControllerReadsSilentPodsOnce(t *testing.T) {
	var pn podNet
	objs := []client.Object{workload("wl", "job", true, 100)}
	for i := range 8 {
		objs = append(objs, trainingPod(fmt.Sprintf("job-%d", i), "job", pn.add(newSilentPod(t).ln.Addr())))
	}
	objs = append(objs, trainingPod("job-9", "job", pn.add(goodPod(t, rank0Body))))
	r, c := setup(t, true, pn.fetcher(), objs...)
	start := time.Now()
	reconcileOne(t, r, "wl")
	// Read one after another this was 16 s; the room above the one
	// deadline is for a loaded machine.
	assert.Less(t, time.Since(start), 2*statusTimeout)
	_, ok := boostOf(t, c, "wl")
	assert.False(t, ok, "rank 0's checkpoint fits its grace period: no boost")
}
