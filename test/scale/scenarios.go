package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func (e *env) heap(ctx context.Context) (float64, error) {
	s, err := e.scrape(ctx)
	if err != nil {
		return 0, err
	}
	return s.sum("go_memstats_heap_inuse_bytes"), nil
}

func (e *env) managedPods(ctx context.Context) ([]corev1.Pod, error) {
	return e.listPods(ctx, client.MatchingLabels{contract.LabelManaged: "true"})
}

// SteadyReport is trainguard at rest with the whole population.
type SteadyReport struct {
	RSSMiB, PeakRSSMiB, CPUPercent         float64
	RequestsPerSec, WritesPerSec           float64
	HeapMiB, HeapPerNodeKiB, HeapPerPodKiB float64
	GOMEMLIMIT                             string
}

func (e *env) steady(ctx context.Context, empty, withNodes float64, managed int) (*SteadyReport, error) {
	time.Sleep(15 * time.Second) // the first reconcile of every pod passes
	s0, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	p0, err := sampleProc(e.tg.Cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	time.Sleep(e.o.Steady)
	s1, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	p1, err := sampleProc(e.tg.Cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	dt := p1.at.Sub(p0.at).Seconds()
	heap := s1.sum("go_memstats_heap_inuse_bytes")
	r := &SteadyReport{
		RSSMiB: mib(p1.rssKB), PeakRSSMiB: mib(p1.hwmKB), CPUPercent: 100 * (p1.cpu - p0.cpu).Seconds() / dt,
		RequestsPerSec: (s1.requests() - s0.requests()) / dt, WritesPerSec: (s1.writes() - s0.writes()) / dt,
		HeapMiB:        heap / (1 << 20),
		HeapPerNodeKiB: (withNodes - empty) / float64(e.o.Nodes) / 1024,
		HeapPerPodKiB:  (heap - withNodes) / float64(managed) / 1024,
	}
	for _, kv := range e.tgEnv {
		if v, ok := strings.CutPrefix(kv, "GOMEMLIMIT="); ok {
			r.GOMEMLIMIT = v
		}
	}
	fmt.Fprintf(e.out, "  trainguard RSS %.1f MiB (peak %.1f MiB, GOMEMLIMIT %s from the chart's limit), CPU %.1f %% of a core over %s\n",
		r.RSSMiB, r.PeakRSSMiB, r.GOMEMLIMIT, r.CPUPercent, e.o.Steady)
	fmt.Fprintf(e.out, "  own API requests %.2f/s (writes %.2f/s)\n", r.RequestsPerSec, r.WritesPerSec)
	fmt.Fprintf(e.out, "  Go heap in use %.1f MiB: %.2f KiB per node, %.2f KiB per managed pod (heap growth while each was added)\n",
		r.HeapMiB, r.HeapPerNodeKiB, r.HeapPerPodKiB)
	return r, nil
}

// decisionReasons are the rescheduler's decision Events (not the cause
// Events NodeLost and RetryableExit that precede them).
func isDecision(reason string) bool {
	return reason != rescheduler.ReasonNodeLost && reason != rescheduler.ReasonRetryableExit
}

// trainguardEvents lists the rescheduler's Events on pods since t.
func (e *env) trainguardEvents(ctx context.Context, since time.Time) ([]eventsv1.Event, error) {
	var out []eventsv1.Event
	cont := ""
	for {
		var l eventsv1.EventList
		if err := e.c.List(ctx, &l, client.Limit(5000), client.Continue(cont)); err != nil {
			return nil, err
		}
		for _, ev := range l.Items {
			if ev.ReportingController == rescheduler.ControllerName && eventTime(&ev).After(since) {
				out = append(out, ev)
			}
		}
		if cont = l.Continue; cont == "" {
			return out, nil
		}
	}
}

func eventTime(ev *eventsv1.Event) time.Time {
	if !ev.EventTime.IsZero() {
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// loggedDecisions adds to m, for pods without an earlier one, the
// decisions trainguard logged ("rescheduler decision", "rescheduler action
// held"; 1 s resolution): Events can be aggregated or dropped by the
// recorder under load, the log line is written for every decision.
func (e *env) loggedDecisions(m map[string]decision, since time.Time) error {
	for _, p := range e.tgLogs {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Bytes()
			if !bytes.Contains(line, []byte(`"msg":"rescheduler decision"`)) && !bytes.Contains(line, []byte(`"msg":"rescheduler action held"`)) {
				continue
			}
			// A map, not a struct: the line has both "Pod" (an object)
			// and "pod" (a string), which a struct matches alike.
			var l map[string]json.RawMessage
			if json.Unmarshal(line, &l) != nil {
				continue
			}
			var ts, pod, dec, held string
			_ = json.Unmarshal(l["ts"], &ts)
			_ = json.Unmarshal(l["pod"], &pod)
			_ = json.Unmarshal(l["decision"], &dec)
			_ = json.Unmarshal(l["held"], &held)
			at, err := time.Parse(time.RFC3339Nano, ts)
			// The log has whole seconds: a line of the second the
			// scenario started counts.
			if err != nil || pod == "" || at.Before(since.Truncate(time.Second)) {
				continue
			}
			reason := dec
			if held != "" {
				reason = held
			}
			if d, ok := m[pod]; !ok || at.Before(d.at.Truncate(time.Second)) {
				m[pod] = decision{at: at, reason: reason}
			}
		}
		_ = f.Close() // read only
		if err := sc.Err(); err != nil {
			return err
		}
	}
	return nil
}

// decisionsSince is every pod's first decision since start, from the
// rescheduler's Events and its log.
func (e *env) decisionsSince(ctx context.Context, start time.Time) (map[string]decision, error) {
	evs, err := e.trainguardEvents(ctx, start)
	if err != nil {
		return nil, err
	}
	decided := firstDecisions(evs)
	if err := e.loggedDecisions(decided, start); err != nil {
		return nil, err
	}
	return decided, nil
}

// allDecided says whether every pod of want has a decision.
func allDecided[V any](want map[string]V, decided map[string]decision) bool {
	for k := range want {
		if _, ok := decided[k]; !ok {
			return false
		}
	}
	return true
}

// firstDecisions maps "namespace/pod" to the time and reason of its first
// decision Event among evs.
func firstDecisions(evs []eventsv1.Event) map[string]decision {
	m := map[string]decision{}
	for i := range evs {
		ev := &evs[i]
		if ev.Regarding.Kind != "Pod" || !isDecision(ev.Reason) {
			continue
		}
		k := ev.Regarding.Namespace + "/" + ev.Regarding.Name
		if d, ok := m[k]; !ok || eventTime(ev).Before(d.at) {
			m[k] = decision{at: eventTime(ev), reason: ev.Reason}
		}
	}
	return m
}

type decision struct {
	at     time.Time
	reason string
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// OutageReport is what happens when one zone's Leases stop.
type OutageReport struct {
	Brake                                 bool
	Flags                                 []string `json:",omitempty"`
	Nodes, AffectedPods, Decided          int
	DecisionP50, DecisionP99, DecisionMax float64 // seconds after the node's Lease deadline
	Reasons                               map[string]int
	Spent
	WritesPerPodBeyondAction    float64
	BrakeEngaged                bool
	BrakeReleased               bool // once the zone's Leases were renewed again
	OtherZonesActedOn           int
	ImpliedSecondsAtDefaultRate float64
}

// outage stops the Leases of zone 0 and waits until every managed pod on
// it has a decision. With brake, trainguard runs as the chart sets it
// (the zone brake holds the whole zone); without, trainguard is
// restarted with the zone brake off and the node bucket wide open, to
// measure how fast it decides and acts when nothing holds it.
func (e *env) outage(ctx context.Context, brake bool) (*OutageReport, error) {
	r := &OutageReport{Brake: brake, Reasons: map[string]int{}}
	if !brake {
		r.Flags = []string{"--unhealthy-zone-threshold=1", "--node-eviction-rate=1000", "--node-eviction-burst=1000"}
		e.tg.Stop()
		if err := e.startTrainguard(ctx, append(r.Flags, e.leaseFlags()...)...); err != nil {
			return nil, err
		}
		time.Sleep(15 * time.Second) // the new leader's first reconcile of every pod
	}
	if err := e.drainChurn(ctx); err != nil {
		return nil, err
	}
	pods, err := e.managedPods(ctx)
	if err != nil {
		return nil, err
	}
	zoneNodes := map[string]bool{}
	for i := range e.o.Nodes {
		if e.o.zoneOf(i) == 0 {
			zoneNodes[nodeName(i)] = true
		}
	}
	r.Nodes = len(zoneNodes)
	affected := map[string]string{} // pod -> node
	others := 0
	healthyOthers := map[string]bool{} // running pods of the other zones: none may be acted on
	for i := range pods {
		if pods[i].DeletionTimestamp != nil {
			continue
		}
		if zoneNodes[pods[i].Spec.NodeName] {
			affected[pods[i].Namespace+"/"+pods[i].Name] = pods[i].Spec.NodeName
		} else {
			others++
			if pods[i].Status.Phase == corev1.PodRunning {
				healthyOthers[pods[i].Namespace+"/"+pods[i].Name] = true
			}
		}
	}
	r.AffectedPods = len(affected)
	s0, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	e.stopKWOK("outage")
	deadline, err := e.leaseDeadlines(ctx, zoneNodes)
	if err != nil {
		return nil, err
	}
	var last time.Time
	for _, d := range deadline {
		if d.After(last) {
			last = d
		}
	}
	fmt.Fprintf(e.out, "  zone %s: KWOK stopped, %d nodes silent, %d managed pods on them; last Lease deadline %s after the stop\n",
		zoneName(0), r.Nodes, r.AffectedPods, last.Sub(start).Round(time.Second))
	var decided map[string]decision
	err = waitFor(ctx, time.Until(last)+3*time.Minute, func() (bool, error) {
		var err error
		if decided, err = e.decisionsSince(ctx, start); err != nil {
			return false, err
		}
		n := 0
		for k := range affected {
			if _, ok := decided[k]; ok {
				n++
			}
		}
		r.Decided = n
		return n == len(affected), nil
	})
	if err != nil {
		fmt.Fprintf(e.out, "  only %d of %d affected pods decided: %v\n", r.Decided, r.AffectedPods, err)
	}
	var lat []float64
	for k, node := range affected {
		if d, ok := decided[k]; ok {
			lat = append(lat, d.at.Sub(deadline[node]).Seconds())
			r.Reasons[d.reason]++
		}
	}
	for k := range decided {
		if healthyOthers[k] {
			r.OtherZonesActedOn++
		}
	}
	r.DecisionP50, r.DecisionP99, r.DecisionMax = quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 1)
	if brake {
		// The brake must keep holding: nothing evicted a while later either.
		time.Sleep(15 * time.Second)
	}
	s1, err := e.spentSince(ctx, s0, start, &r.Spent)
	if err != nil {
		return nil, err
	}
	r.BrakeEngaged = s1.sum("trainguard_rescheduler_brake_engaged", `zone="`+zoneName(0)+`"`) == 1
	r.WritesPerPodBeyondAction = (r.Writes - r.Evicted - r.ForceDeleted - r.Events) / float64(max(r.AffectedPods, 1))
	// With the chart's token bucket (0.1 lost nodes/s, burst 3) and no
	// brake, the last node of the zone would be acted on this long after
	// the first.
	r.ImpliedSecondsAtDefaultRate = float64(max(r.Nodes-3, 0)) / 0.1
	if err := e.checkOtherZones(ctx, zoneNodes, others, r); err != nil {
		return nil, err
	}
	fmt.Fprintf(e.out, "  decided %d of %d affected pods; after the Lease deadline: p50 %.1fs p99 %.1fs max %.1fs; decisions %v\n",
		r.Decided, r.AffectedPods, r.DecisionP50, r.DecisionP99, r.DecisionMax, r.Reasons)
	fmt.Fprintf(e.out, "  zone brake engaged: %v; evicted %.0f, force-deleted %.0f; API writes %.0f (Events %.0f), %.2f writes per affected pod beyond Events and the eviction/deletion; pods of other zones acted on: %d\n",
		r.BrakeEngaged, r.Evicted, r.ForceDeleted, r.Writes, r.Events, r.WritesPerPodBeyondAction, r.OtherZonesActedOn)
	if brake {
		fmt.Fprintf(e.out, "  without the brake, the chart's --node-eviction-rate=0.1 (burst 3) would reach the zone's last node %.0f s after its first\n", r.ImpliedSecondsAtDefaultRate)
		if r.BrakeReleased, err = e.restore(ctx, "outage", zoneName(0)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// checkOtherZones counts the managed pods of the other zones that are gone.
func (e *env) checkOtherZones(ctx context.Context, zoneNodes map[string]bool, before int, r *OutageReport) error {
	pods, err := e.managedPods(ctx)
	if err != nil {
		return err
	}
	n := 0
	for i := range pods {
		if !zoneNodes[pods[i].Spec.NodeName] {
			n++
		}
	}
	if n < before {
		r.OtherZonesActedOn += before - n
	}
	return nil
}

// leaseFlags: the flags every trainguard start of the run gets, the
// Lease-duration ones and the run's TrainguardFlags.
func (e *env) leaseFlags() []string {
	flags := append([]string{}, e.o.TrainguardFlags...)
	if e.o.LeaseSeconds == 40 {
		return flags
	}
	d := strconv.Itoa(e.o.LeaseSeconds) + "s"
	return append(flags, "--lease-lost-after="+d, "--force-delete-after="+d)
}

// lostAfter is trainguard's --lease-lost-after in the run: the shipped
// default beside the kubelet's 40 s Leases, else the Lease duration.
func (e *env) lostAfter() time.Duration {
	if e.o.LeaseSeconds == 40 {
		return configv1alpha1.DefaultLeaseLostAfter
	}
	return time.Duration(e.o.LeaseSeconds) * time.Second
}

// leaseDeadlines reads the nodes' Leases: each deadline is the last
// renewal plus trainguard's --lease-lost-after (lostAfter).
func (e *env) leaseDeadlines(ctx context.Context, nodes map[string]bool) (map[string]time.Time, error) {
	var l coordinationv1.LeaseList
	if err := e.c.List(ctx, &l, client.InNamespace(corev1.NamespaceNodeLease)); err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for _, ls := range l.Items {
		if nodes[ls.Name] && ls.Spec.RenewTime != nil {
			out[ls.Name] = ls.Spec.RenewTime.Add(e.lostAfter())
		}
	}
	if len(out) != len(nodes) {
		return nil, fmt.Errorf("%d of %d nodes have a renewed Lease: KWOK did not keep them", len(out), len(nodes))
	}
	return out, nil
}

// restore restarts a KWOK instance and waits until every node's Lease is
// renewed again; released says trainguard's brake gauge for zone (or
// "(cluster)") read 0 10 s later (its leader judges an engaged brake again
// every 2 s).
func (e *env) restore(ctx context.Context, group, zone string) (released bool, err error) {
	t := time.Now()
	if err := e.startKWOK(ctx, group); err != nil {
		return false, err
	}
	all := map[string]bool{}
	for i := range e.o.Nodes {
		all[nodeName(i)] = true
	}
	err = waitFor(ctx, 3*time.Minute, func() (bool, error) {
		var l coordinationv1.LeaseList
		if err := e.c.List(ctx, &l, client.InNamespace(corev1.NamespaceNodeLease)); err != nil {
			return false, err
		}
		for _, ls := range l.Items {
			if all[ls.Name] && (ls.Spec.RenewTime == nil || ls.Spec.RenewTime.Time.Before(t)) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("KWOK %s restarted, but not every Lease was renewed: %w", group, err)
	}
	renewed := time.Since(t)
	time.Sleep(10 * time.Second) // the leader judges an engaged brake every 2 s
	sc, err := e.scrape(ctx)
	if err != nil {
		return false, err
	}
	gauge := sc.sum("trainguard_rescheduler_brake_engaged", `zone="`+zone+`"`)
	fmt.Fprintf(e.out, "  KWOK %s restarted; every Lease renewed after %s; trainguard_rescheduler_brake_engaged{zone=%q} %.0f 10 s later\n",
		group, renewed.Round(time.Second), zone, gauge)
	return gauge == 0, nil
}

// Spent is what trainguard did in a scenario: API writes (its client's
// POST, PUT, PATCH, DELETE), Event objects, pods evicted and force-deleted.
type Spent struct {
	Writes, Events, Evicted, ForceDeleted float64
}

// spentSince fills sp with what trainguard did since s0 and start, and
// returns the scrape it ended with.
func (e *env) spentSince(ctx context.Context, s0 series, start time.Time, sp *Spent) (series, error) {
	s1, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	evs, err := e.trainguardEvents(ctx, start)
	if err != nil {
		return nil, err
	}
	sp.Events = float64(len(evs))
	sp.Writes = s1.writes() - s0.writes()
	sp.Evicted, sp.ForceDeleted = actions(s0, s1)
	return s1, nil
}

// StallReport is what happens when every Lease stops at once.
type StallReport struct {
	BrakeAfter float64 // seconds after the stop
	HeldFor    float64
	Spent
	// EvictedAfter and ForceDeletedAfter: once the Leases came back.
	EvictedAfter, ForceDeletedAfter float64
	PodsGone                        int
	BrakeReleased                   bool // once every Lease was renewed again
}

func (e *env) stall(ctx context.Context) (*StallReport, error) {
	r := &StallReport{}
	before, err := e.managedPods(ctx)
	if err != nil {
		return nil, err
	}
	s0, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	e.stopKWOK("outage")
	e.stopKWOK("rest")
	lease := time.Duration(e.o.LeaseSeconds) * time.Second
	if err := waitFor(ctx, lease+time.Minute, func() (bool, error) {
		s, err := e.scrape(ctx)
		return err == nil && s.sum("trainguard_rescheduler_brake_engaged", `zone="(cluster)"`) == 1, err
	}); err != nil {
		fmt.Fprintf(e.out, "  the cluster brake did not engage: %v\n", err)
	} else {
		r.BrakeAfter = time.Since(start).Seconds()
	}
	// Hold 15 s past the last Lease deadline (the force-delete bound is
	// the same as the Lease's at the chart's 40 s and in the smoke run).
	time.Sleep(time.Until(start.Add(lease + 15*time.Second)))
	r.HeldFor = time.Since(start).Seconds()
	s1, err := e.spentSince(ctx, s0, start, &r.Spent)
	if err != nil {
		return nil, err
	}
	after, err := e.managedPods(ctx)
	if err != nil {
		return nil, err
	}
	r.PodsGone = len(before) - len(after)
	fmt.Fprintf(e.out, "  all KWOK stopped: cluster brake engaged %.0f s later; after %.0f s: %.0f evicted, %.0f force-deleted, %d managed pods gone; %.0f API writes (%.0f Events)\n",
		r.BrakeAfter, r.HeldFor, r.Evicted, r.ForceDeleted, r.PodsGone, r.Writes, r.Events)
	if err := e.startKWOK(ctx, "outage"); err != nil {
		return nil, err
	}
	if r.BrakeReleased, err = e.restore(ctx, "rest", "(cluster)"); err != nil {
		return nil, err
	}
	// The end of a stall is as dangerous as its start: Leases come back
	// one by one, and the brake releases before the last are renewed.
	// The last come back within a renewal interval (a quarter of the
	// Lease) of the first.
	time.Sleep(lease/2 + 5*time.Second)
	s2, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	r.EvictedAfter, r.ForceDeletedAfter = actions(s1, s2)
	fmt.Fprintf(e.out, "  after the brake released: %.0f evicted, %.0f force-deleted\n", r.EvictedAfter, r.ForceDeletedAfter)
	return r, nil
}

// ChurnReport is training pods failing with exit 137.
type ChurnReport struct {
	Failed, Evicted                int
	Reasons                        map[string]int
	DecisionP50, DecisionP99       float64 // seconds from the exit to the decision Event
	PerNamespace                   map[string]ChurnNamespace
	FairnessMinP50, FairnessMaxP50 float64
	NamespaceRateLimited           float64
}

// ChurnNamespace is one tenant's share.
type ChurnNamespace struct {
	Failed, Evicted int
	P50             float64
}

func (e *env) churn(ctx context.Context) (*ChurnReport, error) {
	r := &ChurnReport{Reasons: map[string]int{}, PerNamespace: map[string]ChurnNamespace{}}
	pods, err := e.managedPods(ctx)
	if err != nil {
		return nil, err
	}
	s0, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(34, 1))
	rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	const tick = 5 * time.Second
	perTick := e.o.ChurnPercent / 100 * float64(len(pods)) * tick.Seconds() / 60
	start := time.Now()
	failedAt := map[string]time.Time{}
	var mu sync.Mutex
	next := 0
	for k := 1; time.Since(start) < e.o.Churn && next < len(pods); k++ {
		batch := pods[next:min(int(float64(k)*perTick), len(pods))]
		next += len(batch)
		if err := e.o.parallel(len(batch), func(i int) error {
			p := &batch[i]
			at, err := e.exit137(ctx, p)
			if err != nil {
				return err
			}
			mu.Lock()
			failedAt[p.Namespace+"/"+p.Name] = at
			mu.Unlock()
			return nil
		}); err != nil {
			return nil, err
		}
		time.Sleep(time.Until(start.Add(time.Duration(k) * tick)))
	}
	r.Failed = len(failedAt)
	// The last exits' decisions: up to 30 s, no longer than they take.
	_ = waitFor(ctx, 30*time.Second, func() (bool, error) { // a timeout leaves some undecided: counted below
		decided, err := e.decisionsSince(ctx, start)
		return err == nil && allDecided(failedAt, decided), err
	})
	decided, err := e.decisionsSince(ctx, start)
	if err != nil {
		return nil, err
	}
	var all []float64
	perNS := map[string][]float64{}
	for k, at := range failedAt {
		ns, _, _ := strings.Cut(k, "/")
		c := r.PerNamespace[ns]
		c.Failed++
		if d, ok := decided[k]; ok {
			r.Reasons[d.reason]++
			lat := d.at.Sub(at).Seconds()
			all = append(all, lat)
			perNS[ns] = append(perNS[ns], lat)
			if d.reason == rescheduler.ReasonGracefulDelete || d.reason == rescheduler.ReasonForceDelete {
				c.Evicted++
				r.Evicted++
			}
		}
		r.PerNamespace[ns] = c
	}
	r.DecisionP50, r.DecisionP99 = quantile(all, 0.5), quantile(all, 0.99)
	r.FairnessMinP50, r.FairnessMaxP50 = -1, 0
	for ns, lat := range perNS {
		c := r.PerNamespace[ns]
		c.P50 = quantile(lat, 0.5)
		r.PerNamespace[ns] = c
		if r.FairnessMinP50 < 0 || c.P50 < r.FairnessMinP50 {
			r.FairnessMinP50 = c.P50
		}
		r.FairnessMaxP50 = max(r.FairnessMaxP50, c.P50)
	}
	s1, err := e.scrape(ctx)
	if err != nil {
		return nil, err
	}
	r.NamespaceRateLimited = s1.sum("trainguard_rescheduler_actions_held_total", `reason="NamespaceRateLimited"`) -
		s0.sum("trainguard_rescheduler_actions_held_total", `reason="NamespaceRateLimited"`)
	fmt.Fprintf(e.out, "  %d training pods exited 137 over %s (%.1f %%/min): %d evicted; exit to decision p50 %.2fs p99 %.2fs; decisions %v\n",
		r.Failed, e.o.Churn, e.o.ChurnPercent, r.Evicted, r.DecisionP50, r.DecisionP99, r.Reasons)
	fmt.Fprintf(e.out, "  per-namespace bucket holds: %.0f; fairness over %d namespaces: median exit-to-decision from %.2fs to %.2fs\n",
		r.NamespaceRateLimited, len(perNS), r.FairnessMinP50, r.FairnessMaxP50)
	return r, nil
}

// exit137 writes what the kubelet reports when the training container is
// killed (exit 137) and the pod's restartPolicy is Never: the pod Failed.
func (e *env) exit137(ctx context.Context, p *corev1.Pod) (time.Time, error) {
	now := metav1.Now()
	base := p.DeepCopy()
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: now, StartedAt: now}}}}
	if err := e.c.Status().Patch(ctx, p, client.MergeFrom(base)); err != nil {
		return time.Time{}, fmt.Errorf("failing %s/%s: %w", p.Namespace, p.Name, err)
	}
	return now.Time, nil
}

// drainChurn waits (at most 5 minutes) until no managed pod is left
// Failed: the churn's exits all decided (an evicted pod is gone), so the
// outage's decisions do not queue behind them, and a churned pod of
// another zone decided during the outage is not counted as acted on.
func (e *env) drainChurn(ctx context.Context) error {
	start := time.Now()
	left := 0
	err := waitFor(ctx, 5*time.Minute, func() (bool, error) {
		pods, err := e.managedPods(ctx)
		if err != nil {
			return false, err
		}
		left = 0
		for i := range pods {
			if pods[i].Status.Phase == corev1.PodFailed && pods[i].DeletionTimestamp == nil {
				left++
			}
		}
		return left == 0, nil
	})
	if took := time.Since(start); took > 5*time.Second || err != nil {
		fmt.Fprintf(e.out, "  waited %s for the churn's exits to be decided (%d left)\n", took.Round(time.Second), left)
	}
	if err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}
