package rescheduler

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ConfigMap data keys of a bad-node record.
const (
	dataNodes       = "nodes"       // JSON {"node": "expiry (RFC 3339)"}
	dataReschedules = "reschedules" // reschedule rounds so far
	dataRoundStart  = "roundStart"  // RFC 3339 start of the latest round
	dataJob         = "job"         // JobKey.String(), for humans
	dataPendingPod  = "pendingPod"  // JSON pod: a bare pod awaiting recreation
	dataReplaces    = "replacesUID" // UID of the deleted pod the pending pod replaces
)

// Record is one job's bad-node record, stored in a ConfigMap named
// JobKey.RecordName() in the job's namespace and labelled
// trainguard.io/bad-nodes=true.
type Record struct {
	// Nodes maps a bad node to the time its record expires.
	Nodes       map[string]time.Time
	Reschedules int
	RoundStart  time.Time
	// PendingPod is a bare pod to recreate once the deleted one, whose UID
	// is Replaces, is gone.
	PendingPod *corev1.Pod
	Replaces   types.UID
}

// decodeRecord reads a record. A missing key is an empty value, so a
// hand-made ConfigMap with only "nodes" works.
func decodeRecord(cm *corev1.ConfigMap) (Record, error) {
	r := Record{Nodes: map[string]time.Time{}}
	if v := cm.Data[dataNodes]; v != "" {
		if err := json.Unmarshal([]byte(v), &r.Nodes); err != nil {
			return Record{}, fmt.Errorf("decoding %s of ConfigMap %s/%s: %w", dataNodes, cm.Namespace, cm.Name, err)
		}
	}
	if v := cm.Data[dataReschedules]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return Record{}, fmt.Errorf("decoding %s of ConfigMap %s/%s: %w", dataReschedules, cm.Namespace, cm.Name, err)
		}
		r.Reschedules = n
	}
	if v := cm.Data[dataRoundStart]; v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return Record{}, fmt.Errorf("decoding %s of ConfigMap %s/%s: %w", dataRoundStart, cm.Namespace, cm.Name, err)
		}
		r.RoundStart = t
	}
	if v := cm.Data[dataPendingPod]; v != "" {
		r.PendingPod = &corev1.Pod{}
		if err := json.Unmarshal([]byte(v), r.PendingPod); err != nil {
			return Record{}, fmt.Errorf("decoding %s of ConfigMap %s/%s: %w", dataPendingPod, cm.Namespace, cm.Name, err)
		}
	}
	r.Replaces = types.UID(cm.Data[dataReplaces])
	return r, nil
}

// encodeInto writes the record into cm's data, replacing what was there.
func (r *Record) encodeInto(cm *corev1.ConfigMap, key JobKey) error {
	nodes := map[string]string{}
	for n, exp := range r.Nodes {
		nodes[n] = exp.UTC().Format(time.RFC3339)
	}
	nodesJSON, err := json.Marshal(nodes)
	if err != nil {
		return fmt.Errorf("encoding bad nodes: %w", err)
	}
	cm.Data = map[string]string{
		dataNodes:       string(nodesJSON),
		dataReschedules: strconv.Itoa(r.Reschedules),
		dataJob:         key.String(),
	}
	if !r.RoundStart.IsZero() {
		cm.Data[dataRoundStart] = r.RoundStart.UTC().Format(time.RFC3339)
	}
	if r.PendingPod != nil {
		podJSON, err := json.Marshal(r.PendingPod)
		if err != nil {
			return fmt.Errorf("encoding pending pod: %w", err)
		}
		cm.Data[dataPendingPod] = string(podJSON)
		cm.Data[dataReplaces] = string(r.Replaces)
	}
	return nil
}

// Active returns the unexpired bad nodes, at most limit of them (those
// recorded last win), sorted by name so the affinity is deterministic.
func (r *Record) Active(now time.Time, limit int) []string {
	type entry struct {
		node string
		exp  time.Time
	}
	var live []entry
	for n, exp := range r.Nodes {
		if exp.After(now) {
			live = append(live, entry{n, exp})
		}
	}
	sort.Slice(live, func(i, j int) bool {
		if !live[i].exp.Equal(live[j].exp) {
			return live[i].exp.After(live[j].exp)
		}
		return live[i].node < live[j].node
	})
	if len(live) > limit {
		live = live[:limit]
	}
	nodes := make([]string, 0, len(live))
	for _, e := range live {
		nodes = append(nodes, e.node)
	}
	sort.Strings(nodes)
	return nodes
}

// Recorded says node is recorded and unexpired.
func (r *Record) Recorded(node string, now time.Time) bool {
	exp, ok := r.Nodes[node]
	return ok && exp.After(now)
}

// AddNode records node as bad until now+ttl, drops expired entries and keeps
// at most limit nodes, evicting those that expire first.
func (r *Record) AddNode(node string, now time.Time, ttl time.Duration, limit int) {
	if r.Nodes == nil {
		r.Nodes = map[string]time.Time{}
	}
	r.Nodes[node] = now.Add(ttl)
	keep := map[string]time.Time{}
	for _, n := range r.Active(now, limit) {
		keep[n] = r.Nodes[n]
	}
	r.Nodes = keep
}
