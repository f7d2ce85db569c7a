package webhook

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	"github.com/trainguard/trainguard/internal/foundations/promreg"
)

// ephemeralEventInterval is how often at most a namespace gets an
// EphemeralCheckpoints (or EphemeralCheckpointsRefused) Event. An Event per
// object was an API write per admission, the whole gap between trainguard
// and a webhook that returns the same patch for free (docs/performance.md);
// the admission warning and the metric still come per object.
const ephemeralEventInterval = time.Minute

// maxFoldWindows bounds the windows kept: past it, the expired ones are
// dropped (with the count they held back; the metric still has it), and if
// every one is still open the object gets its Event unfolded.
const maxFoldWindows = 4096

// eventFold lets one Event per namespace and reason through per interval
// and counts the objects it holds back, so the next Event names them.
type eventFold struct {
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	windows map[foldKey]*foldWindow
}

type foldKey struct{ namespace, reason string }

type foldWindow struct {
	until  time.Time // no Event for this key before then
	folded int       // objects held back since the last Event
}

func newEventFold(interval time.Duration) *eventFold {
	return &eventFold{interval: interval, now: time.Now, windows: map[foldKey]*foldWindow{}}
}

// admit counts one object. It returns emit when this object gets the Event,
// with objects: how many it stands for (itself and those held back since
// the previous one).
func (f *eventFold) admit(namespace, reason string) (emit bool, objects int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now, key := f.now(), foldKey{namespace, reason}
	w, ok := f.windows[key]
	if !ok {
		if len(f.windows) >= maxFoldWindows {
			f.dropExpired(now)
		}
		if len(f.windows) >= maxFoldWindows {
			return true, 1
		}
		w = &foldWindow{}
		f.windows[key] = w
	}
	if now.Before(w.until) {
		w.folded++
		return false, 0
	}
	objects, w.folded, w.until = w.folded+1, 0, now.Add(f.interval)
	return true, objects
}

func (f *eventFold) dropExpired(now time.Time) {
	for k, w := range f.windows {
		if !now.Before(w.until) {
			delete(f.windows, k)
		}
	}
}

// foldedReporter is what audit mode and the durable-checkpoint check
// share: a counter per object, by namespace, kind and verdict, and a
// Warning Event on the object folded per namespace and reason, which names
// how many objects it stands for.
type foldedReporter struct {
	events  events.EventRecorder
	objects *prometheus.CounterVec
	fold    *eventFold
}

// newFoldedReporter registers the counter opts describes, labelled
// namespace, kind and verdictLabel; what names it in the error.
func newFoldedReporter(reg prometheus.Registerer, rec events.EventRecorder, opts prometheus.CounterOpts, verdictLabel, what string) (foldedReporter, error) {
	objects, err := promreg.Register(reg, prometheus.NewCounterVec(opts, []string{"namespace", "kind", verdictLabel}))
	if err != nil {
		return foldedReporter{}, fmt.Errorf("registering the %s metric: %w", what, err)
	}
	return foldedReporter{events: rec, objects: objects, fold: newEventFold(ephemeralEventInterval)}, nil
}

// record counts the object req admits under verdict and, when the fold
// lets it through, writes the Event format and args say, followed by the
// count it stands for.
func (r *foldedReporter) record(req *admissionv1.AdmissionRequest, verdict, reason, action, format string, args ...any) {
	r.objects.WithLabelValues(req.Namespace, req.Kind.Kind, verdict).Inc()
	if r.events == nil {
		return
	}
	emit, objects := r.fold.admit(req.Namespace, reason)
	if !emit {
		return
	}
	regarding := &corev1.ObjectReference{APIVersion: apiVersion(req), Kind: req.Kind.Kind, Namespace: req.Namespace, Name: req.Name}
	if req.Name == "" { // generateName: the object has no name yet, its namespace does
		regarding = &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: req.Namespace}
	}
	r.events.Eventf(regarding, nil, corev1.EventTypeWarning, reason, action,
		format+" (%d such object(s) in namespace %s since the last such Event, this one included: one Event per namespace every %s)",
		append(args, objects, req.Namespace, r.fold.interval)...)
}

func apiVersion(req *admissionv1.AdmissionRequest) string {
	if req.Kind.Group == "" {
		return req.Kind.Version
	}
	return req.Kind.Group + "/" + req.Kind.Version
}

func displayName(req *admissionv1.AdmissionRequest) string {
	if req.Name == "" {
		return "(generated name) in namespace " + req.Namespace
	}
	return req.Namespace + "/" + req.Name
}
