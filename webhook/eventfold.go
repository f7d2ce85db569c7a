package webhook

import (
	"sync"
	"time"
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
