package rescheduler

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/jobs"
)

// ConfigMap data keys of a bad-node record.
const (
	dataNodes       = "nodes"       // JSON {"node": "expiry (RFC 3339)"}
	dataStrikes     = "strikes"     // JSON {"node": {"count": n, "at": "RFC 3339"}}: failures of the job on the node
	dataReschedules = "reschedules" // reschedule rounds so far
	dataRoundStart  = "roundStart"  // RFC 3339 start of the latest round
	dataJob         = "job"         // jobs.Key.String(): checked against the name on every read
	dataJobUID      = "jobUID"      // UID of the job's controller, so a job recreated under the same name starts afresh
	dataStash       = "stash"       // JSON Stash: a bare pod awaiting recreation
	dataAPIVersion  = "jobAPIVersion"
	// dataInPlaceRestarts is the job's in-place restarts so far: the
	// highest restart count of a training container seen restarting in
	// place after a process fault (the job's ranks restart together).
	dataInPlaceRestarts = "inPlaceRestarts"
	// dataInPlaceStopped is "true" once the in-place restarts reached the
	// job's cap: the pod webhook gives the job's new pods no restart rules.
	dataInPlaceStopped = "inPlaceStopped"
)

// maxRecordBytes bounds what is decoded from one record. trainguard's own
// records are a few KiB (a stashed bare pod included); anything larger was
// not written by it.
const maxRecordBytes = 256 << 10

// Record is one job's bad-node record. It lives in a ConfigMap named
// RecordName in trainguard's own namespace, labelled
// trainguard.io/bad-nodes=true, where no tenant can write.
type Record struct {
	// Nodes maps a bad node to the time its record expires.
	Nodes map[string]time.Time
	// Strikes counts, per recorded node, the separate times it failed the
	// job, and when it last did. A node absent from it (a record written
	// before strikes were kept) failed once.
	Strikes     map[string]Strike
	Reschedules int
	RoundStart  time.Time
	// JobUID is the UID of the pod's controller when the record was written.
	JobUID types.UID
	// Stash is a bare pod to recreate once the deleted one is gone.
	Stash *Stash
	// InPlaceRestarts counts the job's in-place restarts (dataInPlaceRestarts).
	InPlaceRestarts int
	// InPlaceStopped: the in-place restarts reached the job's cap.
	InPlaceStopped bool
}

// Strike is how often a recorded node failed the job (Count) and when it
// last did (At): a pod of the job created after At that fails on the node
// is a new failure, not one more pod of the same incident.
type Strike struct {
	Count int       `json:"count"`
	At    time.Time `json:"at"`
}

// Stash is what trainguard keeps of a bare pod it evicted: a reference to
// the pod it observed (namespace, name, UID) and that pod's labels,
// annotations and spec, read from the API server by trainguard itself.
// The replacement is built from it by replacementFor, always in Namespace.
type Stash struct {
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	UID         types.UID         `json:"uid"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Spec        corev1.PodSpec    `json:"spec"`
}

// recordError says why a record was ignored; reason labels the metric.
type recordError struct {
	reason string
	err    error
}

func (e *recordError) Error() string { return e.err.Error() }

func badRecord(reason, format string, args ...any) *recordError {
	return &recordError{reason: reason, err: fmt.Errorf(format, args...)}
}

// decodeRecord reads the record of key from cm and checks that it is the
// record of that key: its name, its job field and, for a stash, the pod it
// refers to. A missing data key is an empty value.
func decodeRecord(cm *corev1.ConfigMap, key jobs.Key) (Record, error) {
	where := fmt.Sprintf("ConfigMap %s/%s", cm.Namespace, cm.Name)
	if size := dataSize(cm); size > maxRecordBytes {
		return Record{}, badRecord("too-large", "%s: %d bytes of data, more than the %d a record can hold", where, size, maxRecordBytes)
	}
	if cm.Name != RecordName(key) || cm.Data[dataJob] != key.String() {
		return Record{}, badRecord("mismatch", "%s: data.%s=%q is not the record of %s", where, dataJob, cm.Data[dataJob], key)
	}
	r := Record{Nodes: map[string]time.Time{}, JobUID: types.UID(cm.Data[dataJobUID])}
	if v := cm.Data[dataNodes]; v != "" {
		if err := json.Unmarshal([]byte(v), &r.Nodes); err != nil {
			return Record{}, badRecord("parse", "%s: data.%s: %v", where, dataNodes, err)
		}
	}
	if v := cm.Data[dataStrikes]; v != "" {
		if err := json.Unmarshal([]byte(v), &r.Strikes); err != nil {
			return Record{}, badRecord("parse", "%s: data.%s: %v", where, dataStrikes, err)
		}
		for n, s := range r.Strikes {
			if s.Count < 1 {
				return Record{}, badRecord("parse", "%s: data.%s: node %q has count %d: want at least 1", where, dataStrikes, n, s.Count)
			}
		}
	}
	if v := cm.Data[dataReschedules]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return Record{}, badRecord("parse", "%s: data.%s=%q: want a count", where, dataReschedules, v)
		}
		r.Reschedules = n
	}
	if v := cm.Data[dataInPlaceRestarts]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return Record{}, badRecord("parse", "%s: data.%s=%q: want a count", where, dataInPlaceRestarts, v)
		}
		r.InPlaceRestarts = n
	}
	switch v := cm.Data[dataInPlaceStopped]; v {
	case "", "false":
	case "true":
		r.InPlaceStopped = true
	default:
		return Record{}, badRecord("parse", "%s: data.%s=%q: want true or false", where, dataInPlaceStopped, v)
	}
	if v := cm.Data[dataRoundStart]; v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return Record{}, badRecord("parse", "%s: data.%s: %v", where, dataRoundStart, err)
		}
		r.RoundStart = t
	}
	if v := cm.Data[dataStash]; v != "" {
		s, err := decodeStash(v, key)
		if err != nil {
			return Record{}, badRecord("stash", "%s: data.%s: %v", where, dataStash, err)
		}
		r.Stash = s
	}
	return r, nil
}

// decodeStash accepts only a stash of key's own bare pod.
func decodeStash(v string, key jobs.Key) (*Stash, error) {
	if !key.Bare() {
		return nil, fmt.Errorf("only a bare pod's record holds a stash; %s is not one", key)
	}
	s := &Stash{}
	if err := json.Unmarshal([]byte(v), s); err != nil {
		return nil, err
	}
	switch {
	case s.Namespace != key.Namespace || s.Name != key.Name:
		return nil, fmt.Errorf("names pod %s/%s, not %s/%s", s.Namespace, s.Name, key.Namespace, key.Name)
	case s.UID == "":
		return nil, fmt.Errorf("uid is empty")
	case len(s.Spec.Containers) == 0:
		return nil, fmt.Errorf("spec.containers is empty")
	}
	return s, nil
}

func dataSize(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	for k, v := range cm.BinaryData {
		n += len(k) + len(v)
	}
	return n
}

// encodeInto writes the record into cm's data, replacing what was there.
func (r *Record) encodeInto(cm *corev1.ConfigMap, key jobs.Key) error {
	nodes := map[string]string{}
	for n, exp := range r.Nodes {
		nodes[n] = exp.UTC().Format(time.RFC3339)
	}
	nodesJSON, err := json.Marshal(nodes)
	if err != nil {
		return fmt.Errorf("encoding bad nodes: %w", err)
	}
	cm.BinaryData = nil
	cm.Data = map[string]string{
		dataNodes:       string(nodesJSON),
		dataReschedules: strconv.Itoa(r.Reschedules),
		dataJob:         key.String(),
		dataAPIVersion:  key.APIVersion,
	}
	if r.JobUID != "" {
		cm.Data[dataJobUID] = string(r.JobUID)
	}
	if len(r.Strikes) > 0 {
		strikes := map[string]Strike{}
		for n, s := range r.Strikes {
			strikes[n] = Strike{Count: s.Count, At: s.At.UTC().Truncate(time.Second)}
		}
		raw, err := json.Marshal(strikes)
		if err != nil {
			return fmt.Errorf("encoding the strikes: %w", err)
		}
		cm.Data[dataStrikes] = string(raw)
	}
	if r.InPlaceRestarts > 0 {
		cm.Data[dataInPlaceRestarts] = strconv.Itoa(r.InPlaceRestarts)
	}
	if r.InPlaceStopped {
		cm.Data[dataInPlaceStopped] = "true"
	}
	if !r.RoundStart.IsZero() {
		cm.Data[dataRoundStart] = r.RoundStart.UTC().Format(time.RFC3339)
	}
	if r.Stash != nil {
		raw, err := json.Marshal(r.Stash)
		if err != nil {
			return fmt.Errorf("encoding the stashed pod: %w", err)
		}
		cm.Data[dataStash] = string(raw)
	}
	if size := dataSize(cm); size > maxRecordBytes {
		return fmt.Errorf("record of %s would hold %d bytes, more than %d: the bare pod's spec is too large to stash", key, size, maxRecordBytes)
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

// Avoid is how a new pod of the job avoids the unexpired bad nodes (at
// most limit, as Active): a node that failed the job again is required,
// one that failed it once only preferred, so a node that healed stays
// usable when it is all the job has left (podspec.Avoid).
func (r *Record) Avoid(now time.Time, limit int) podspec.Avoid {
	var a podspec.Avoid
	for _, n := range r.Active(now, limit) {
		if r.Strikes[n].Count >= 2 {
			a.Required = append(a.Required, n)
		} else {
			a.Preferred = append(a.Preferred, n)
		}
	}
	return a
}

// Recorded says node is recorded and unexpired.
func (r *Record) Recorded(node string, now time.Time) bool {
	exp, ok := r.Nodes[node]
	return ok && exp.After(now)
}

// AddNode records node as bad until now+ttl, drops expired entries and keeps
// at most limit nodes, evicting those that expire first. podCreated is the
// failed pod's creation: a pod created after the node's last strike failed
// there again (a second strike); a pod that was on the node already is the
// same incident. A node not recorded, or expired, starts at one strike.
func (r *Record) AddNode(node string, podCreated, now time.Time, ttl time.Duration, limit int) {
	if r.Nodes == nil {
		r.Nodes = map[string]time.Time{}
	}
	if r.Strikes == nil {
		r.Strikes = map[string]Strike{}
	}
	s, known := r.Strikes[node]
	switch {
	case !r.Recorded(node, now):
		s = Strike{Count: 1, At: now}
	case !known:
		s = Strike{Count: 1, At: r.Nodes[node].Add(-ttl)} // recorded before strikes were kept
	}
	if r.Recorded(node, now) && podCreated.After(s.At) {
		s = Strike{Count: s.Count + 1, At: now}
	}
	r.Strikes[node] = s
	r.Nodes[node] = now.Add(ttl)
	keep := map[string]time.Time{}
	strikes := map[string]Strike{}
	for _, n := range r.Active(now, limit) {
		keep[n] = r.Nodes[n]
		if s, ok := r.Strikes[n]; ok {
			strikes[n] = s
		}
	}
	r.Nodes, r.Strikes = keep, strikes
}
