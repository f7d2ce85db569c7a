package rescheduler

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
)

// watchStaller holds back the node Lease watch events a proxy passes to
// the manager: its cache stops seeing renewals while every kubelet (here:
// the test) renews through the API server, as with a stalled watch.
type watchStaller struct {
	mu      sync.Mutex
	stalled bool
	resume  chan struct{}
}

func (s *watchStaller) stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stalled {
		s.stalled, s.resume = true, make(chan struct{})
	}
}

func (s *watchStaller) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stalled {
		s.stalled = false
		close(s.resume)
	}
}

func (s *watchStaller) wait() {
	s.mu.Lock()
	stalled, resume := s.stalled, s.resume
	s.mu.Unlock()
	if stalled {
		<-resume
	}
}

// stallingWriter writes a watch stream's events only while not stalled.
type stallingWriter struct {
	http.ResponseWriter
	s *watchStaller
}

func (w stallingWriter) Write(b []byte) (int, error) {
	w.s.wait()
	return w.ResponseWriter.Write(b)
}

func (w stallingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// startLeaseWatchProxy serves the API server over plain HTTP with the
// control plane's credentials; watches of kube-node-lease Leases stall
// while the staller says so. Everything else, GETs of a Lease included,
// passes at once.
func startLeaseWatchProxy(t *testing.T) (string, *watchStaller) {
	t.Helper()
	target, err := url.Parse(env.cp.Config.Host)
	require.NoError(t, err)
	transport, err := rest.TransportFor(env.cp.Config)
	require.NoError(t, err)
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.Out.Host = target.Host },
		Transport:     transport,
		FlushInterval: -1,
	}
	s := &watchStaller{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/namespaces/"+corev1.NamespaceNodeLease+"/leases") && r.URL.Query().Get("watch") != "" {
			w = stallingWriter{ResponseWriter: w, s: s}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { s.release(); srv.CloseClientConnections(); srv.Close() })
	return srv.URL, s
}

// TestStaleLeaseView (docs/rescheduler.md's claim that a broken watch
// stops action): 3 zones of 2 nodes, every kubelet
// renewing its Lease every second through the API server, and the
// manager's Lease watch stalled for longer than --lease-lost-after plus
// --force-delete-after. Before the fix the manager evicted and then
// force-deleted every pod (the zone brake needs 3 unhealthy nodes per
// zone). Now the cluster brake holds (PartitionSuspected), and with the
// cluster brake off the live read of each node's Lease does
// (LeaseViewStale): nothing is evicted or deleted either way.
func TestStaleLeaseView(t *testing.T) {
	env.replaceShared(t)
	for _, tc := range []struct {
		name      string
		threshold float64
		reason    string
	}{
		{"cluster brake", 0.5, resched.ReasonPartitionSuspected},
		{"live Lease read, cluster brake off", 1, resched.ReasonLeaseViewStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxyURL, staller := startLeaseWatchProxy(t)
			o := defaultOptions()
			o.LeaseLostAfter.Duration, o.ForceDeleteAfter.Duration = 4*time.Second, 4*time.Second
			o.UnhealthyClusterThreshold = tc.threshold
			m := env.startManagerForTest(t, managerOptions{Rescheduler: o, APIHost: proxyURL})

			ns := namespace(t)
			ctx, stop := context.WithCancel(context.Background())
			t.Cleanup(stop)
			var pods []*corev1.Pod
			for i := range 6 {
				node := readyNode(t, ns, fmt.Sprintf("n%d", i))
				inZone(t, node, fmt.Sprintf("%s-z%d", ns, i/2))
				renewLease(t, node)
				go renewEvery(ctx, t, node, time.Second)
				pod := workerOf(t, pytorchJob(t, ns, fmt.Sprintf("j%d", i), nil)).onNode(node).create(t)
				running(t, pod)
				pods = append(pods, pod)
			}
			time.Sleep(3 * time.Second) // the manager has seen every Lease renewed

			stalled := time.Now()
			staller.stall()
			time.Sleep(o.LeaseLostAfter.Duration + o.ForceDeleteAfter.Duration + 4*time.Second)
			for _, pod := range pods {
				assertUntouched(t, pod)
			}
			if tc.reason == resched.ReasonPartitionSuspected {
				// One Event for the cluster brake, on the first pod it held
				// (maybe another test's); each pod's hold is its log line.
				waitEventSince(t, tc.reason, stalled)
				for _, pod := range pods {
					require.Eventually(t, func() bool { return heldAbout(t, m, ns, pod.Name, tc.reason) > 0 },
						waitFor, tick, "pod %s held by the cluster brake", pod.Name)
				}
			} else {
				waitEventOnAny(t, pods, tc.reason)
			}
			staller.release()
		})
	}
}

// inZone moves node to zone.
func inZone(t *testing.T, name, zone string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := env.c.Get(context.Background(), client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		node.Labels[corev1.LabelTopologyZone] = zone
		return env.c.Update(context.Background(), node)
	}))
}
