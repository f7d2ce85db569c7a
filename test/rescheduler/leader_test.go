package rescheduler

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	resched "github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/test/controlplane"
)

// Two replicas with leader election: both serve (the API server calls only
// the first's port), only the leader reschedules; when it stops, it releases
// the lease and the other takes over.
func TestLeaderElectionOnlyOneReplicaActs(t *testing.T) {
	env.replaceShared(t)
	ensureNamespace(t, controlplane.Namespace) // the lease lives there
	first := env.startManagerForTest(t, managerOptions{Rescheduler: defaultOptions(), LeaderElect: true})
	second := env.startManagerForTest(t, managerOptions{Rescheduler: defaultOptions(), LeaderElect: true, Port: freePort(t)})
	replicas := []*manager{first, second}

	ns := namespace(t)
	node := readyNode(t, ns, "a")
	pod := workerOf(t, pytorchJob(t, ns, "le-one", nil)).onNode(node).create(t)
	// Created now, while the webhook port is served; it fails after the leader stops.
	later := workerOf(t, pytorchJob(t, ns, "le-two", nil)).onNode(node).create(t)
	running(t, later)

	exited(t, pod, 137)
	waitDeleted(t, pod)
	waitEvent(t, pod, resched.ReasonGracefulDelete)
	var leader, standby *manager
	require.Eventually(t, func() bool {
		for i, m := range replicas {
			if m.decisionsAbout(t, ns, pod.Name) > 0 {
				leader, standby = m, replicas[1-i]
				return true
			}
		}
		return false
	}, waitFor, tick, "the leader logs its decision")
	assert.Equal(t, 1, leader.decisionsAbout(t, ns, pod.Name), "the leader decided once")
	assert.Zero(t, standby.decisionsAbout(t, ns, pod.Name), "the standby did not act")
	assert.Len(t, podEvents(t, pod), 2, "one cause and one decision Event: %v", reasons(podEvents(t, pod)))

	// The leader goes; the standby takes the lease (released on stop) and acts.
	require.NoError(t, leader.stop())
	stopped := time.Now()
	exited(t, later, 137)
	waitDeleted(t, later)
	t.Logf("standby acted %s after the leader stopped", time.Since(stopped).Round(time.Millisecond))
	// The decision is logged just after the eviction: the pod may be gone
	// a moment before the line is in the log file.
	require.Eventually(t, func() bool { return standby.decisionsAbout(t, ns, later.Name) > 0 }, waitFor, tick, "the new leader logs its decision")
	assert.Equal(t, 1, standby.decisionsAbout(t, ns, later.Name), "the new leader decided once")
	assert.Zero(t, leader.decisionsAbout(t, ns, later.Name))
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
