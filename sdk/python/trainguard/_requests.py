"""The trainer's side of the agent's request protocol
(docs/checkpoint-protocol.md): the pods' signal directories, the requests
trainguard-agent's preStop writes there, the acks global rank 0 writes
back, and the heartbeat local rank 0 of each pod keeps.

Every signal directory is on the job's volume, so everything read there is
hostile: each is opened through its parent's descriptor without following
a symlink, and each pod's request is judged on its own.
"""

import logging
import os
import threading
import time

from . import _protocol as proto

log = logging.getLogger("trainguard")

# Requests remembered per signal dir: the dir holds one request.json at a
# time, so the last few are all a rewrite of the file can bring back.
_HANDLED_KEEP = 16


class SignalDirs:
    """This pod's signal dir and, for global rank 0 of a job of more than
    one process, its siblings (the other pods'). root: a callable giving
    the checkpoint directory (proto.Dir) or None."""

    def __init__(self, settings, root):
        self._settings, self._root = settings, root
        self._own = None  # proto.Dir, opened once
        self._parent = None  # its parent, when that is not the checkpoint directory
        self._siblings = {}  # name -> proto.Dir of the other pods' signal dirs
        self._lock = threading.Lock()
        self.waker = None  # a _wake.Waker once listening: every dir read is watched

    @property
    def own_key(self):
        """This pod's signal dir's name: the key of its requests among its siblings'."""
        return os.path.basename(os.path.abspath(self._settings.config.signal_dir))

    def own(self):
        """This pod's signal dir, opened once through the checkpoint
        directory's descriptor, one component at a time, none a symlink
        (a planted .trainguard symlink once led heartbeats and acks out of
        the job's directory). Local rank 0 creates it; other processes wait
        for it (None until then). The listener and the training thread
        both ask: one opens it."""
        if self._own is not None:
            return self._own
        with self._lock:
            if self._own is None:
                self._open()
            return self._own

    def _open(self):
        cfg = self._settings.config
        create = cfg.local_rank == 0
        base, sig = os.path.abspath(cfg.checkpoint_dir), os.path.abspath(cfg.signal_dir)
        rel = os.path.relpath(sig, base)
        root = self._root()
        try:
            if root is not None and rel != "." and not rel.startswith(".."):
                parent = root
                for part in rel.split(os.sep)[:-1]:
                    child = parent.sub(part, create)
                    if parent is not root:
                        parent.close()
                    parent = child
            else:
                # A signal dir outside the checkpoint dir (MIGRATION_SIGNAL_PATH):
                # its parent is the user's; the dir itself is checked like ours.
                if create:
                    os.makedirs(os.path.dirname(sig), exist_ok=True)
                parent = proto.Dir.open(os.path.dirname(sig))
            try:
                self._own = parent.sub(os.path.basename(sig), create)
            except BaseException:
                if parent is not root:
                    parent.close()
                raise
        except FileNotFoundError:
            if create:
                raise
            return
        self._parent = parent if parent is not root else None

    def all(self):
        """(name, Dir) of the signal dirs rank 0 answers, sorted: a single
        process watches its own; with more, every pod's of the job, siblings
        in the job's own checkpoint directory. A symlink among them could
        lead rank 0 to acknowledge another job's request."""
        own = self.own()
        dirs = [(self.own_key, own)] if own is not None else []
        parent = self._parent or self._root()
        if self._settings.config.world_size > 1 and parent is not None and own is not None:
            try:
                entries = [e.name for e in parent.entries() if e.is_dir(follow_symlinks=False)]
            except OSError:
                entries = []
            for name in set(self._siblings) - set(entries):
                self._siblings.pop(name).close()
            for name in entries:
                if name == self.own_key:
                    continue
                d = self._sibling(parent, name)
                if d is not None:
                    dirs.append((name, d))
            self._watch(parent)
        for _, d in dirs:
            self._watch(d)
        return sorted(dirs, key=lambda t: t[0])

    def _watch(self, d):
        if self.waker is not None:
            self.waker.watch(d.path)

    def _sibling(self, parent, name):
        """Another pod's signal dir, kept open while it is the same directory."""
        d = self._siblings.get(name)
        try:
            st = parent.lstat(name)
            if d is not None and (os.fstat(d.fd).st_ino, os.fstat(d.fd).st_dev) == (st.st_ino, st.st_dev):
                return d
            if d is not None:
                self._siblings.pop(name).close()
            d = self._siblings[name] = parent.sub(name)
            return d
        except OSError:
            return None

    def get(self, name):
        return self.own() if name == self.own_key else self._siblings.get(name)

    def peer_heartbeats(self):
        """name -> the heartbeat (or None) of every other pod's signal dir."""
        beats = {}
        for name, d in self.all():
            if name == self.own_key:
                continue
            try:
                beats[name] = d.read_json(proto.HEARTBEAT_FILE)
            except Exception:  # an unreadable heartbeat says nothing
                continue
        return beats

    def close(self):
        for d in [self._own, self._parent] + list(self._siblings.values()):
            if d is not None:
                d.close()
        self._own = self._parent = None
        self._siblings = {}


class Requests:
    """The requests seen and answered. A request is known by its
    (generation, nonce): at the largest generation (2^53-1) every request of
    a pod has the same generation, and only the nonce tells the next from
    the last."""

    def __init__(self, settings, dirs):
        self._settings, self.dirs = settings, dirs
        self.lock = threading.Lock()
        self.pending = {}  # signal dir -> (generation, nonce) waiting for the next safe point
        self._handled = {}  # signal dir -> (generation, nonce) answered or dismissed, newest last
        self._warned = set()  # signal dirs whose bad request was already logged

    def heartbeat(self, phase, step, started):
        """Local rank 0 writes its pod's heartbeat; started names this incarnation."""
        cfg = self._settings.config
        if cfg.local_rank != 0:
            return
        self.dirs.own().write_json_atomic(proto.HEARTBEAT_FILE, {
            "pid": os.getpid(), "time": time.time(), "state": phase, "step": step,
            "generation": self._handled_generation(self.dirs.own_key), "rank": cfg.rank, "started": started,
        })

    def scan(self, dirs=None):
        """Global rank 0 queues every live request not yet handled, in dirs
        (self.dirs.all() when None). Each pod's request is judged on its
        own: a malformed one (a "deadline": "soon" once raised here and hid
        every pod sorted after it) is logged once and skipped."""
        now = time.time()
        for name, d in self.dirs.all() if dirs is None else dirs:
            try:
                self._scan_one(name, d, now)
            except Exception as e:  # an unreadable dir, a flaky volume: the next pod still counts
                self._warn_once(name, "trainguard: ignoring the request in %s: %s: %s", d.path, type(e).__name__, e)

    def _scan_one(self, name, d, now):
        raw = d.read_json(proto.REQUEST_FILE)
        if raw is None:
            return
        try:
            req = proto.parse_request(raw)
        except ValueError as e:
            self._warn_once(name, "trainguard: ignoring the request in %s: %s", d.path, e)
            return
        gen, nonce = req["generation"], req["nonce"]
        key = (gen, nonce)
        with self.lock:
            if name not in self._handled:
                # First look at this dir: a request acknowledged before we
                # started is done. Only an ack that answers it (its
                # generation and nonce) says so: a planted ack of a huge
                # generation once silenced the pod's every request.
                ack = d.read_json(proto.ACK_FILE) or {}
                done = ack.get("generation") == gen and ack.get("nonce", "") == nonce
                self._handled[name] = [key] if done else []
            if key in self._handled[name] or self.pending.get(name) == key:
                return
            if not proto.live(req, now):
                # Its agent has given up (e.g. the request predates this process).
                self._mark_handled(name, key)
                log.info("trainguard: ignoring expired request generation %d in %s", gen, d.path)
                return
            self.pending[name] = key

    def take(self):
        """The pending requests, handled from now on, not only after the
        ack: the listener scans while the save runs, and would otherwise
        queue the same request again and answer it a second time a step later."""
        with self.lock:
            requests, self.pending = self.pending, {}
            for name, key in requests.items():
                self._mark_handled(name, key)
        return requests

    def ack(self, requests, step, name, size, error):
        """Answer requests with checkpoint name (size bytes) at step, or the error."""
        for directory, (generation, nonce) in requests.items():
            ack = {"generation": generation, "nonce": nonce, "status": "error" if error else "ok",
                   "step": step, "checkpoint": name or "", "bytes": size if name else 0,
                   "error": error, "acked_at": time.time()}
            try:
                self.dirs.get(directory).write_json_atomic(proto.ACK_FILE, ack)
            except (OSError, AttributeError) as e:
                log.error("trainguard: cannot acknowledge generation %d in %s: %s", generation, directory, e)
            with self.lock:
                self._mark_handled(directory, (generation, nonce))

    def own_stop_requested(self):
        """Whether this pod's agent asks for a checkpoint on behalf of this
        incarnation (its preStop hook runs: the pod is being stopped),
        answered or not."""
        sig = self.dirs.own()
        if sig is None:
            return False
        try:
            req = proto.parse_request(sig.read_json(proto.REQUEST_FILE))
        except ValueError:
            return False
        return proto.live(req, time.time()) and not proto.for_other_incarnation(req, self._settings.config.pod_uid)

    def own_ack(self):
        """(generation, nonce) of the ack in this pod's signal dir, if it
        says ok and answers the request there, which the agent still waits
        for (same generation and nonce, not expired) on behalf of this
        incarnation of the pod; else (0, ""). A forged ack with no request
        behind it once stopped the trainer with 143, and a zombie's preStop
        its replacement."""
        sig = self.dirs.own()
        if sig is None:
            return 0, ""
        ack = sig.read_json(proto.ACK_FILE) or {}
        gen, nonce = ack.get("generation"), ack.get("nonce", "")
        if not proto.is_count(gen, 1) or ack.get("status") != "ok":
            return 0, ""
        try:
            req = proto.parse_request(sig.read_json(proto.REQUEST_FILE))
        except ValueError:
            return 0, ""
        if req["generation"] != gen or req["nonce"] != nonce or not proto.live(req, time.time()):
            return 0, ""
        if proto.for_other_incarnation(req, self._settings.config.pod_uid):
            self._warn_once(("incarnation", nonce),
                            "trainguard: the acknowledged request in %s is another incarnation's of this pod "
                            "(uid %r, this one is %r): its checkpoint is taken, this trainer does not stop",
                            sig.path, req["pod_uid"], self._settings.config.pod_uid)
            return 0, ""
        return gen, nonce

    def _warn_once(self, name, fmt, *args):
        if name not in self._warned:
            self._warned.add(name)
            log.warning(fmt, *args)

    def _mark_handled(self, name, key):
        """Record a request answered or dismissed; under self.lock."""
        keys = self._handled.setdefault(name, [])
        if key not in keys:
            keys.append(key)
            del keys[:-_HANDLED_KEEP]

    def _handled_generation(self, name):
        """The largest generation handled in a signal dir (the heartbeat's
        generation, which the agent's next request exceeds when it can)."""
        return max((g for g, _ in self._handled.get(name, ())), default=0)


# A request written before this incarnation began listening (less this
# allowance for the pods' clocks) is from before a restart: not answered.
_NOW_CLOCK_SKEW = 10.0


class NowRequests:
    """Checkpoint-now requests as global rank 0 reads them: what each pod's
    status server filed in its signal dir (_status.py, proto.NOW_FILE).
    They make one target step: the job commits the first step boundary at or
    after it, with at most one such extra checkpoint per now_interval across
    the job (another commit that covers the step answers it as well)."""

    def __init__(self, settings, dirs, clock=time.monotonic):
        self._settings, self.dirs, self._clock = settings, dirs, clock
        self.lock = threading.Lock()
        self.target = None  # the step to commit by; None: nothing asked
        self.started = time.time()
        self._seen = {}  # signal dir -> nonce of the request last read there
        self._last = None  # clock() when the last extra checkpoint for one was taken
        self._warned = set()

    def scan(self, step, dirs=None):
        """Global rank 0, at `step`: note every request not yet read in dirs
        (self.dirs.all() when None)."""
        for name, d in self.dirs.all() if dirs is None else dirs:
            try:
                raw = d.read_json(proto.NOW_FILE)
                if raw is None:
                    continue
                req = proto.parse_now(raw)
            except Exception as e:  # each pod's request on its own, as the agent's
                if name not in self._warned:
                    self._warned.add(name)
                    log.warning("trainguard: ignoring the checkpoint-now request in %s: %s", d.path, e)
                continue
            if self._seen.get(name) == req["nonce"]:
                continue
            self._seen[name] = req["nonce"]
            if req["requested_at"] < self.started - _NOW_CLOCK_SKEW:
                continue
            # The pods train in lockstep, a step apart at most, so no real
            # request names a step beyond rank 0's next: a forged larger
            # one must not keep the request waiting for ever.
            target = min(req["step"], step + 1)
            with self.lock:
                self.target = target if self.target is None else max(self.target, target)
            log.info("trainguard: checkpoint now, asked in %s at step %d: %s", d.path, req["step"],
                     req["reason"] or "no reason given")

    def due(self, step, committed_step):
        """Whether rank 0 takes an extra checkpoint at this boundary."""
        with self.lock:
            if self.target is None:
                return False
            if committed_step is not None and committed_step >= self.target:
                self.target = None  # a commit since covers it
                return False
            if step < self.target:
                return False
            interval = self._settings.config.now_interval
            return self._last is None or self._clock() - self._last >= interval

    def taken(self, step, extra=False):
        """A checkpoint of step was committed (or, in the background, started);
        extra: it was taken for a request, and counts against the interval."""
        with self.lock:
            if self.target is not None and step >= self.target:
                self.target = None
            if extra:
                self._last = self._clock()
