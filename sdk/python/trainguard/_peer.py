"""A peer's death is never a permanent failure.

When one rank of a job dies (SIGKILL by the OOM killer, a segfault, a lost
node), every other rank's next collective fails: gloo says "Connection
closed by peer" or "Connection reset by peer", NCCL names a remote error or
times out. Left alone, the survivor's RuntimeError ends it with exit 1, which
kubeflow's ExitCode restart policy and trainguard's rescheduler both take as
the user's own bug: the whole job is marked Failed seconds after one process
was killed. The SDK ends such a rank with EXIT_PEER_LOST instead, a
retryable code; an exception raised by the user's own code keeps exit 1.

The classification is narrow on purpose: the exception must be a
RuntimeError (or torch.distributed's DistBackendError/DistNetworkError, a
ConnectionError), raised from inside torch (its innermost frame is in torch's
package: a user's own `raise RuntimeError("Connection reset by peer")` keeps
the user's verdict), and its type or message must match PATTERNS.

This module never imports torch: it looks at torch only when the trainer has
imported it.
"""

import gc
import logging
import os
import re
import sys
import threading
import time
import types

from . import _exit as exiting

log = logging.getLogger("trainguard")

# 128 + SIGUSR1. kubeflow's ExitCode restart policy retries every code >= 128,
# the rescheduler's table lists 138 as user-retryable, and no signal a
# trainer meets by accident sends SIGUSR1. Go: contract.ExitPeerLost.
EXIT_PEER_LOST = 138

# A trainer under trainguard's supervisor whose group goes on without it
# (rank 0's pod was replaced, with its store) asks its supervisor to start
# it again in the container, at the job's next generation, instead of the
# kubelet's restart of the container and its crash-loop back-off. The
# supervisor passes EXIT_PEER_LOST on when it does not restart it, so the
# code never leaves the container. 75: EX_TEMPFAIL, "try again".
EXIT_REJOIN = 75
ENV_SUPERVISED = "TRAINGUARD_SUPERVISED"  # set by the supervisor for its trainer

# (why, pattern) in the exception's message. Each names a peer that went away
# or a collective that waited for one in vain; nothing here matches what a
# user's own mistake produces (a shape mismatch, an invalid argument).
PATTERNS = (
    ("gloo: connection closed by peer", re.compile(r"Connection closed by peer")),
    ("connection reset by peer", re.compile(r"Connection reset by peer")),
    ("broken pipe to a peer", re.compile(r"Broken pipe")),
    ("gloo: collective timed out", re.compile(r"Timed out waiting \d+ ?ms for (?:send|recv) operation")),
    ("gloo: pair closed after a timeout", re.compile(r"Application timeout caused pair closure")),
    ("NCCL: remote error", re.compile(r"ncclRemoteError|remote process exit(?:ing|ed) prematurely")),
    ("NCCL: communicator aborted", re.compile(r"NCCL communicator was aborted")),
    ("NCCL: collective timed out", re.compile(r"Watchdog caught collective operation timeout")),
    ("NCCL: operations failed or timed out", re.compile(r"Some NCCL operations have failed or timed out")),
)

# torch >= 2: the distributed backend and its store raise these (subclasses
# of RuntimeError). A backend error that says the call itself was wrong is
# the user's.
PEER_TYPES = ("DistBackendError", "DistNetworkError")
USER_ERROR = re.compile(r"invalid (?:usage|argument)", re.IGNORECASE)

# State that rank 0 does not hold in full: a dying gasp of rank 0 alone
# would commit a part of it.
SHARDED_TYPES = ("FullyShardedDataParallel", "ZeroRedundancyOptimizer", "ShardedTensor", "DTensor")


def _type_names(obj_or_type):
    t = obj_or_type if isinstance(obj_or_type, type) else type(obj_or_type)
    return {c.__name__ for c in t.__mro__}


def torch_dir():
    """torch's package directory, or None when the trainer has not imported torch."""
    torch = sys.modules.get("torch")
    path = getattr(torch, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if path else None


def _raised_in(exc, directory):
    """Whether the innermost frame of exc's traceback is under directory."""
    tb = exc.__traceback__
    if tb is None or not directory:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return filename.startswith(directory.rstrip(os.sep) + os.sep)


def classify(exc, origin=None):
    """Why exc means a peer of this rank is gone, or None (the user's own error).
    origin: the directory the exception must come from (default: torch's)."""
    if not isinstance(exc, (RuntimeError, ConnectionError)):
        return None
    if not _raised_in(exc, origin if origin is not None else torch_dir()):
        return None
    names = _type_names(exc)
    message = str(exc)
    for name in PEER_TYPES:
        if name in names and not USER_ERROR.search(message):
            return "torch.distributed " + name
    for why, pattern in PATTERNS:
        if pattern.search(message):
            return why
    return None


def sharded(objects):
    """The names of registered objects whose state is sharded across ranks
    (FSDP, ZeRO, sharded or distributed tensors), a module's submodules included."""
    out = []
    for name, obj in objects.items():
        parts = [obj]
        modules = getattr(obj, "modules", None)
        if callable(modules) and "Module" in _type_names(obj):
            parts = list(modules())
        if any(_type_names(p) & set(SHARDED_TYPES) for p in parts):
            out.append(name)
    return out


def data_parallel(objects):
    """The name of a registered object that is a DistributedDataParallel or
    the module one wraps (every rank then holds the same parameters after a
    completed step), or None. Looks for the wrapper among live objects: this
    runs once, when a peer is gone."""
    by_id = {}
    for name, obj in objects.items():
        if "DistributedDataParallel" in _type_names(obj):
            return name
        by_id[id(obj)] = name
    is_ddp = {}  # by type: the MRO is read once per type, not per object
    for o in gc.get_objects():
        t = type(o)
        hit = is_ddp.get(t)
        if hit is None:
            hit = is_ddp[t] = "DistributedDataParallel" in _type_names(t)
        if hit and id(getattr(o, "module", None)) in by_id:
            return by_id[id(o.module)]
    return None


class OptimizerSteps:
    """Counts optimizer.step() calls of registered optimizers: a step()
    block that failed after the optimizer began to step holds a state that is
    neither the last completed step nor the next. torch >= 2 has step pre
    hooks; torch 1.13 has none, so the instance's step is wrapped (as a bound
    method, which LR schedulers wrap again)."""

    def __init__(self):
        self.count = 0
        self.watched = 0
        self._ids = set()

    @staticmethod
    def is_optimizer(obj):
        return "Optimizer" in _type_names(obj) and hasattr(obj, "param_groups") and callable(getattr(obj, "step", None))

    def watch(self, obj):
        if not self.is_optimizer(obj) or id(obj) in self._ids:
            return
        self._ids.add(id(obj))
        self.watched += 1
        if hasattr(obj, "register_step_pre_hook"):
            obj.register_step_pre_hook(self._bump)
            return
        inner = obj.step
        counter = self

        def step(_self, *args, **kwargs):
            counter.count += 1
            return inner(*args, **kwargs)

        # An LR scheduler made before registration checks for its own mark.
        if getattr(inner, "_with_counter", False):
            step._with_counter = True
        obj.step = types.MethodType(step, obj)

    def _bump(self, *_):
        self.count += 1


class PeerRestarted(RuntimeError):
    """A peer this rank trained with restarted: its collectives with this
    rank can never complete."""


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e12


class Peers:
    """Tells when a peer rank this rank trained with has restarted, from the
    heartbeats the other pods' trainers write (each names its incarnation:
    "started", when it began listening). A completed step means every rank
    of the group took part, so the incarnations alive then are this rank's
    peers; a later heartbeat of the same pod naming a newer incarnation
    means that peer is gone, and this rank's next or current collective with
    it can only fail or hang. Heartbeats are on the job's own volume, so
    they are read as hostile: only numbers count, a heartbeat older than
    this incarnation (a dead pod's, a planted one) is ignored, and nothing
    but this rank's own exit can follow (which its own job's writer could
    cause anyway)."""

    def __init__(self):
        self.known = {}  # pod -> incarnation this rank trained with
        self.latest = {}  # pod -> newest incarnation seen
        self._at_step = 0

    def observe(self, beats, step, started):
        """beats: pod -> heartbeat dict (or None); step: this rank's
        completed steps; started: this incarnation's start. Returns the pod
        whose trainer restarted since this rank last completed a step with
        it, or None."""
        alive = {}
        for pod, hb in beats.items():
            if not isinstance(hb, dict) or not _number(hb.get("started")) or not _number(hb.get("time")):
                continue
            if hb["time"] < started:
                continue  # not alive while this incarnation was
            alive[pod] = float(hb["started"])
            self.latest[pod] = alive[pod]
        if step > self._at_step:
            self._at_step = step
            self.known.update(alive)
            return None
        for pod, inc in sorted(alive.items()):
            if pod in self.known and inc > self.known[pod]:
                return pod
        return None



class Superseded:
    """Tells when the job's fence generation moved past the one this rank
    last completed a step under: a newer incarnation of the job's rank 0
    claimed it, so this rank's group can never complete another collective.
    The heartbeats (Peers) cannot tell it when the old rank 0 is a zombie
    that still writes its pod's heartbeat (a partitioned node whose pod was
    replaced under the same name), while its packets are dropped: no
    collective fails, and gloo waits its whole timeout. Generations only
    grow within a line, so the zombie cannot hide the claim. A smaller
    newest generation (a reset, reset_generations) is taken as the new
    base."""

    def __init__(self):
        self.known = None  # the newest generation when this rank last completed a step
        self._at_step = 0

    def observe(self, newest, step):
        """newest: the newest generation on the volume; step: this rank's
        completed steps. Returns the newer generation, or None."""
        if not isinstance(newest, int) or isinstance(newest, bool) or newest <= 0:
            return None
        if step > self._at_step:
            self._at_step, self.known = step, newest
            return None
        if self.known is None:
            return None  # no step completed yet: nothing known
        if newest < self.known:
            self.known = newest
            return None
        return newest if newest > self.known else None

class Hooks:
    """sys.excepthook and threading.excepthook, each chaining the hook that
    was there before (the user's, or Python's, which prints the traceback).
    on_peer_lost(exc, why, main) is called after that hook for an exception
    classify() recognises; in the main thread it returns and the hook then
    raises SystemExit(EXIT_PEER_LOST), which Python turns into the exit code
    (atexit handlers still run); in another thread it ends the process."""

    def __init__(self, on_peer_lost):
        self._on_peer_lost = on_peer_lost
        self._prev_sys = self._prev_thread = None

    def install(self):
        if self._prev_sys is not None:
            return
        self._prev_sys, sys.excepthook = sys.excepthook, self._sys_hook
        self._prev_thread, threading.excepthook = threading.excepthook, self._thread_hook

    def uninstall(self):
        """For tests: put back the hooks found (unless someone replaced ours since)."""
        if self._prev_sys is None:
            return
        if sys.excepthook == self._sys_hook:
            sys.excepthook = self._prev_sys
        if threading.excepthook == self._thread_hook:
            threading.excepthook = self._prev_thread
        self._prev_sys = self._prev_thread = None

    def _sys_hook(self, etype, value, tb):
        why = classify(value)
        self._prev_sys(etype, value, tb)
        if why is not None:
            self._on_peer_lost(value, why, True)
            raise SystemExit(EXIT_PEER_LOST)

    def _thread_hook(self, args):
        why = classify(args.exc_value)
        self._prev_thread(args)
        if why is not None:
            self._on_peer_lost(args.exc_value, why, False)
            os._exit(EXIT_PEER_LOST)


class PeerLoss:
    """What this rank does when a peer it trains with is gone: say so, take
    the dying gasp (global rank 0 commits the last completed step), and make
    sure the exit that follows is not stuck. lost() is what the excepthooks
    (hooks) and the step() boundary call; watch() tells a peer that
    restarted from the pods' heartbeats.

    state: the _state.State; save(unless_step): the fenced save of the
    state (_checkpoints.Checkpoints.save); stop(): the listener answers no
    request any more."""

    def __init__(self, settings, state, save, stop):
        self._settings, self._state, self._save, self._stop = settings, state, save, stop
        self.hooks = Hooks(self.lost)
        self.peers = Peers()
        self.superseded = Superseded()
        self.started = time.time()  # this incarnation, in its heartbeat; reset when it starts listening
        self.paused = False  # re-forming in process (_reform.py): the restarted peer is the one awaited
        self._lost = False

    def pod_stopping(self):
        """Whether this pod is being stopped (its preStop hook asked for a
        checkpoint); the Migrator supplies it."""
        return False

    def rejoin_code(self):
        """The exit of a rank its group went on without: EXIT_REJOIN under
        the supervisor, EXIT_PEER_LOST without one, and when this pod is
        being stopped (a trainer started again would hold the pod until
        the end of its grace period: seen in a Kueue preemption whose
        worker's checkpoint request came after rank 0 had left)."""
        if self._settings.env.get(ENV_SUPERVISED) != "1" or self.pod_stopping():
            return EXIT_PEER_LOST
        return EXIT_REJOIN

    def quiet(self):
        """This rank leaves without a dying gasp (its exit is on its way)."""
        self._lost = True

    def reset_peers(self):
        """The group re-formed: the incarnations in it now are the peers,
        and the generation its returning rank 0 claimed is the group's."""
        self.peers = Peers()
        self.superseded = Superseded()

    def lost(self, exc, why, main, traceback=False, code=EXIT_PEER_LOST):
        """exc (classify() says why) failed because a peer is gone; main: in
        the main thread, whose exit a watchdog then bounds; code: the exit
        that follows (EXIT_PEER_LOST, or EXIT_REJOIN to the supervisor)."""
        if self._lost:
            return
        self._lost = True
        cfg = self._settings.config
        log.error("trainguard: rank %d: a peer is gone (%s: %s: %s); exiting %d (%s) after step %d",
                  cfg.rank, why, type(exc).__name__, exc, code,
                  "to rejoin: the supervisor starts it again" if code == EXIT_REJOIN else "retryable",
                  self._state.step, exc_info=exc if traceback else None)
        self.last_words()
        if main and cfg.exit_grace > 0:
            exiting.start_watchdog(cfg.exit_grace, code)
        exiting.flush_output()

    def last_words(self):
        """Stop answering requests and take the dying gasp; the exit that
        follows matters more than the gasp."""
        self._stop()
        try:
            self.dying_gasp()
        except Exception as e:
            log.error("trainguard: no dying-gasp checkpoint: %s: %s", type(e).__name__, e)

    def refusal(self):
        """Why rank 0 must not commit its state as the last completed step, or ""."""
        state = self._state
        parts = sharded(state.objects)
        if parts:
            return "the state is sharded (%s): rank 0 does not hold all of it" % ", ".join(parts)
        if state.replicated is False:
            return "the state is declared not replicated (migrator.replicated(False))"
        if not state.replicated and data_parallel(state.objects) is None:
            return ("the SDK cannot tell that every rank holds the same state (no DistributedDataParallel "
                    "registered); a data-parallel trainer declares it with migrator.replicated()")
        if state.optimizer_steps.watched == 0:
            return "no optimizer is registered, so the SDK cannot tell a completed step from a torn one"
        if state.torn():
            return ("the optimizer stepped after step %d completed but the step was not marked done "
                    "(migrator.step() block): the state is between two steps" % state.step)
        if state.step == 0:
            return "no step has completed yet"
        if not os.path.isdir(self._settings.config.checkpoint_dir):
            return "checkpoint dir %s does not exist" % self._settings.config.checkpoint_dir
        return ""

    def dying_gasp(self):
        """Global rank 0 commits the last completed step through the fenced
        commit path; every other rank leaves it to rank 0 (the state is
        replicated, or nobody saves). All of it, the checks included (they
        may walk every live object to find a DistributedDataParallel), is
        bounded by TRAINGUARD_DUMP_TIMEOUT."""
        cfg = self._settings.config
        if cfg.rank != 0 or cfg.world_size < 2 or cfg.dump_timeout <= 0:
            return
        step, started, box = self._state.step, time.monotonic(), {}

        def gasp():
            try:
                box["refused"] = self.refusal()
                if not box["refused"]:
                    # A periodic save in flight may be this very step: then None.
                    box["name"] = self._save(unless_step=step)
            except Exception as e:
                box["error"] = e

        self._state.phase = "saving"
        worker = threading.Thread(target=gasp, name="trainguard-dying-gasp", daemon=True)
        worker.start()
        worker.join(cfg.dump_timeout)
        took = time.monotonic() - started
        if worker.is_alive():
            log.error("trainguard: no dying-gasp checkpoint: step %d not committed within %gs "
                      "(TRAINGUARD_DUMP_TIMEOUT); exiting without it", step, cfg.dump_timeout)
        elif "error" in box:
            log.error("trainguard: no dying-gasp checkpoint: %s: %s", type(box["error"]).__name__, box["error"])
        elif box.get("refused"):
            log.warning("trainguard: no dying-gasp checkpoint: %s", box["refused"])
        elif box["name"] is None:
            log.info("trainguard: dying gasp: step %d is already committed", step)
        else:
            log.warning("trainguard: dying gasp: committed %s, the last completed step %d, in %.2fs",
                        box["name"], step, took)

    def watch(self, beats, newest=None):
        """Ends this rank retryably when a peer it trained with restarted
        (beats: pod -> heartbeat of every other pod), or when a newer
        incarnation claimed the job's fence generation (newest: the newest
        generation on the volume; Superseded). Its collective may
        never fail: a peer's socket kept open (by a process that inherited
        it, a core dump in progress, a half-open connection) left a survivor
        blocked in gloo's all_reduce for its whole timeout (30 min by
        default) while the peer had restarted in place."""
        if self.paused:
            return
        restarted = self.peers.observe(beats, self._state.step, self.started)
        newer = self.superseded.observe(newest, self._state.step)
        if restarted is not None:
            exc = PeerRestarted("the trainer of %s restarted (a new incarnation started at %s) while rank %d waited "
                                "for it after step %d" % (restarted, time.strftime("%H:%M:%S", time.gmtime(
                                    self.peers.latest[restarted])), self._settings.config.rank, self._state.step))
        elif newer is not None:
            exc = PeerRestarted("a new incarnation of the job claimed fence generation %d (after %d) while rank %d "
                                "waited for its group after step %d: the group's rank 0 was replaced"
                                % (newer, self.superseded.known, self._settings.config.rank, self._state.step))
        else:
            return
        # 138 even under the supervisor: this rank may be the zombie (its
        # pod replaced under its name while partitioned), and a trainer
        # started again there would claim a newer fence generation than
        # its replacement's.
        self.lost(exc, "a peer restarted", False)
        os._exit(EXIT_PEER_LOST)
