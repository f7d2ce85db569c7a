package rescheduler

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainguard/trainguard/internal/foundations/promreg"
)

// metrics are the rescheduler's Prometheus counters. They are created per
// Setup and registered on the registry passed in, never in init().
type metrics struct {
	decisions  *prometheus.CounterVec
	deletions  *prometheus.CounterVec
	badNodes   prometheus.Counter
	recreated  prometheus.Counter
	errorsByOp *prometheus.CounterVec

	brakeEngaged   *prometheus.GaugeVec
	unhealthyNodes *prometheus.GaugeVec
	nodesActedOn   prometheus.Counter
	held           *prometheus.CounterVec
	recordsIgnored *prometheus.CounterVec
	podsIgnored    *prometheus.CounterVec
}

// Metric names, documented in docs/rescheduler.md.
const (
	metricDecisions = "trainguard_rescheduler_decisions_total"
	metricDeletions = "trainguard_rescheduler_pod_deletions_total"
	metricBadNodes  = "trainguard_rescheduler_bad_nodes_recorded_total"
	metricRecreated = "trainguard_rescheduler_bare_pods_recreated_total"
	metricErrors    = "trainguard_rescheduler_errors_total"

	metricBrakeEngaged   = "trainguard_rescheduler_brake_engaged"
	metricUnhealthyNodes = "trainguard_rescheduler_zone_unhealthy_nodes"
	metricNodesActedOn   = "trainguard_rescheduler_nodes_acted_on_total"
	metricHeld           = "trainguard_rescheduler_actions_held_total"
	metricRecordsIgnored = "trainguard_rescheduler_records_ignored_total"
	metricPodsIgnored    = "trainguard_rescheduler_pods_ignored_total"
)

func newMetrics() *metrics {
	return &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricDecisions,
			Help: "Events the rescheduler emitted, by reason (NodeLost, GracefulDelete, PermanentFailure, ...).",
		}, []string{"reason"}),
		deletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricDeletions,
			Help: "Training pods the rescheduler evicted or deleted, by mode (evict: Eviction API with the pod's grace period; evict-now: Eviction API with grace period 0; force: delete with grace period 0, only for pods on a gone or long-unreachable node).",
		}, []string{"mode"}),
		badNodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricBadNodes,
			Help: "Nodes recorded as bad for a job.",
		}),
		recreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricRecreated,
			Help: "Bare pods the rescheduler recreated.",
		}),
		errorsByOp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricErrors,
			Help: "Failed API operations of the rescheduler, by operation.",
		}, []string{"operation"}),
		brakeEngaged: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricBrakeEngaged,
			Help: "1 while the zone brake holds every action in the zone (suspected partition, --unhealthy-zone-threshold), by zone (\"\" for nodes without a zone label).",
		}, []string{"zone"}),
		unhealthyNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricUnhealthyNodes,
			Help: "Nodes carrying managed pods that are NotReady/Unknown, by zone, as last judged by the brake.",
		}, []string{"zone"}),
		nodesActedOn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricNodesActedOn,
			Help: "Nodes admitted by the --node-eviction-rate token bucket (pods on them were evicted or deleted).",
		}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricHeld,
			Help: "Actions the rescheduler held back, by reason (PartitionSuspected, NodeRateLimited, NamespaceRateLimited, LeaseViewStale, EvictionBlocked).",
		}, []string{"reason"}),
		recordsIgnored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricRecordsIgnored,
			Help: "Bad-node records (or bare-pod stashes) ignored because they failed to parse or did not match their job, by reason.",
		}, []string{"reason"}),
		podsIgnored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPodsIgnored,
			Help: "Reconciles of pods labelled trainguard.io/managed=true that the rescheduler left alone because the webhook would not inject them (namespace not opted in, excluded, or the pod opted out), by reason.",
		}, []string{"reason"}),
	}
}

// register adds the counters to reg. When they are already registered (a
// second Setup in the same process, as in tests), the registered ones are
// reused, so counts keep adding up in one place.
func (m *metrics) register(reg prometheus.Registerer) error {
	var errs []error
	m.decisions = promreg.Collect(reg, m.decisions, &errs)
	m.deletions = promreg.Collect(reg, m.deletions, &errs)
	m.badNodes = promreg.Collect(reg, m.badNodes, &errs)
	m.recreated = promreg.Collect(reg, m.recreated, &errs)
	m.errorsByOp = promreg.Collect(reg, m.errorsByOp, &errs)
	m.brakeEngaged = promreg.Collect(reg, m.brakeEngaged, &errs)
	m.unhealthyNodes = promreg.Collect(reg, m.unhealthyNodes, &errs)
	m.nodesActedOn = promreg.Collect(reg, m.nodesActedOn, &errs)
	m.held = promreg.Collect(reg, m.held, &errs)
	m.recordsIgnored = promreg.Collect(reg, m.recordsIgnored, &errs)
	m.podsIgnored = promreg.Collect(reg, m.podsIgnored, &errs)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering rescheduler metrics: %w", err)
	}
	return nil
}
