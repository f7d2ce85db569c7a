"""The Migrator: registration, the listener thread, safe-point saves, resume."""

import contextlib
import logging
import os
import threading
import time

from . import _exit as exiting
from . import _fence as fence
from . import _peer as peer
from . import _periodic as periodic
from . import _protocol as proto
from . import _reform as reform
from . import _status as status
from . import _storage as storage
from . import _wake as wake

log = logging.getLogger("trainguard")

_UNRESOLVED = object()


# How often each pod's trainer reads its peers' heartbeats (Migrator._watch_peers):
# a rank waiting on a peer that restarted ends within about this much.
PEER_WATCH_INTERVAL = 2.0

# Requests remembered per signal dir: the dir holds one request.json at a
# time, so the last few are all a rewrite of the file can bring back.
_HANDLED_KEEP = 16

class Migrator:
    """Checkpoints registered objects when trainguard-agent asks (pod stopping)
    or when save_ckpt() is called, and restores them on the next start."""

    def __init__(self, env=None, read_only=False):
        self._env = env  # None: os.environ, read when first needed
        self._read_only = bool(read_only)
        self._root = None  # the checkpoint directory, opened once (proto.Dir); everything on it is relative to it
        self._sig = None  # this pod's signal dir and its parent (proto.Dir), opened once
        self._sig_parent = None
        self._siblings = {}  # name -> proto.Dir of the other pods' signal dirs (rank 0)
        self._open_lock = threading.Lock()
        self._cfg = None
        self._objects = {}
        self._lock = threading.Lock()
        self._pending = {}  # signal dir -> (generation, nonce) waiting for the next safe point
        # signal dir -> the (generation, nonce) of its requests answered or
        # dismissed, newest last. A request is known by both: at the largest
        # generation (2^53-1) every request of a pod has the same one, and
        # only the nonce tells the next request from the last.
        self._handled = {}
        self._listener = None
        self._stop = threading.Event()
        self._step = 0
        self._state = "training"
        self._resolved = _UNRESOLVED  # (name, payload) or None, decided once
        self._last_ckpt = None
        self._last_bytes = 0
        self._waker = None
        self._warned = set()  # signal dirs whose bad request was already logged
        self._generation = 0  # this incarnation's fence generation (rank 0), claimed when it starts listening
        self._line = ""  # the line of generations it was claimed in ("": no reset yet)
        self.refused_commits = 0  # saves refused because a newer incarnation started
        self._schedule = None  # periodic checkpoints: from the environment unless periodic() set one
        self._writer = periodic.Writer()
        # (generation, nonce, checkpoint) of this pod's acknowledged
        # termination request: the step() boundary then ends training.
        self._termination = None
        self._own_ack_base = None  # (generation, nonce) of this pod's ack when listening began: that one is done
        # Called with {generation, step, checkpoint, outcome, why} instead of
        # exit() once a termination checkpoint is acknowledged and the agent
        # is done; if it returns, training goes on.
        self.termination_hook = None
        self._sigterm = exiting.SigtermFlag()
        # A peer's death (docs/checkpoint-protocol.md, "A peer dies"): the
        # optimizer steps counted, and their count when the last step()
        # block completed, tell a clean step boundary from a torn one.
        self._optimizer_steps = peer.OptimizerSteps()
        self._steps_at_boundary = 0
        self._replicated = None  # declared by replicated(); None: DDP tells
        self._last_step_committed = None  # the step of the last checkpoint written or loaded
        self._last_commit_at = None  # saved_at of the last checkpoint this process wrote
        self._last_save_seconds = None  # how long that write took
        self._status = None  # the work-at-risk server (_status.py), local rank 0 while listening
        self._peer_lost_handled = False
        self._hooks = peer.Hooks(self._on_peer_lost)
        # A peer that restarted while this rank waits on it (peer.Peers).
        self._started = time.time()  # this incarnation, in its heartbeat
        self._peers = peer.Peers()
        # In-process recovery (_reform.py): steps() drives the loop, so an
        # abandoned step can be taken again; no peer watch while re-forming.
        self._driven = False
        self._reforming = False

    # ------------------------------------------------------------------ API

    @property
    def config(self):
        if self._cfg is None:
            self._cfg = proto.Config.from_env(self._env)
        return self._cfg

    @property
    def global_step(self):
        """Optimizer steps completed (counted by step(), restored by load_ckpt())."""
        return self._step

    def register(self, name, obj):
        """Register an object to checkpoint: anything with state_dict() and
        load_state_dict(), or a dict or list (restored in place). Register
        everything before load_ckpt()."""
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")) \
                and not isinstance(obj, (dict, list)):
            raise TypeError("trainguard: cannot checkpoint %r (%s): need state_dict/load_state_dict, "
                            "a dict or a list" % (name, type(obj).__name__))
        self._objects[name] = obj
        self._optimizer_steps.watch(obj)

    def replicated(self, value=True):
        """Declare that every rank holds the same registered state after each
        completed step (data parallel: gradients averaged by hand; a
        registered DistributedDataParallel, or the module it wraps, says so
        by itself), or, with False, that it does not. When a peer dies, a
        surviving global rank 0 then commits the last completed step before
        it exits (the dying gasp), so the crash loses no step."""
        self._replicated = bool(value)
        return self

    def read_only(self):
        """Make this Migrator a reader (an evaluation job, a debug pod): it
        loads checkpoints and writes nothing on the volume. It takes no
        generation, so it never fences the job's trainer; listening() does
        nothing and save_ckpt() raises. Call it before anything else. Also
        Migrator(read_only=True)."""
        self._read_only = True
        return self

    def listening(self):
        """Start the background thread that heartbeats and watches for
        requests: this process is the job's trainer. Global rank 0 claims
        this incarnation's fence generation here, which fences older
        incarnations (a reader must not call it, or be read_only()). Raises
        OSError when the signal directory or its parent is a symlink."""
        if self._listener is not None:
            return self
        # From here on a collective that fails because a peer is gone ends
        # this rank with a retryable code, wherever it fails.
        self._hooks.install()
        cfg = self.config
        if self._read_only:
            log.info("trainguard: read-only: not listening for checkpoint requests in %s", cfg.checkpoint_dir)
            return self
        self._defer_agent_sigterm()
        self._arrive()
        if proto.names_no_job(cfg.job):
            log.warning("trainguard: this pod carries no job-name label (training.kubeflow.org/job-name or "
                        "job-name), so %s is shared by every such pod of the namespace; set "
                        "trainguard.io/checkpoint-key on the job", cfg.checkpoint_dir)
        if cfg.job and not os.path.isdir(cfg.checkpoint_dir):
            # The job's own directory under a claim the user mounted; the webhook named it.
            os.makedirs(cfg.checkpoint_dir, exist_ok=True)
        if not os.path.isdir(cfg.checkpoint_dir):
            log.warning("trainguard: checkpoint dir %s does not exist; not listening for "
                        "checkpoint requests", cfg.checkpoint_dir)
            return self
        if cfg.local_rank == 0:
            self._own_signal()  # creates it; refuses a symlink on the way
        self._own_ack_base = self._own_ack()
        self._claim()
        self._started = time.time()
        self._write_heartbeat()
        self._waker = wake.Waker()
        self._listener = threading.Thread(target=self._listen, name="trainguard-listener", daemon=True)
        self._listener.start()
        self._serve_status()
        return self

    def _environ(self):
        return os.environ if self._env is None else self._env

    def _arrive(self):
        """A trainer its supervisor restarted counts itself in for its
        generation: the survivors wait for every rank before joining."""
        gen = reform.generation(self._environ())
        if gen <= 1:
            return
        try:
            reform.arrive(reform.connect(self._environ(), reform.timeout(self._environ())), gen)
        except Exception as e:  # the survivors time out into the present path
            log.warning("trainguard: cannot count in for generation %d: %s: %s", gen, type(e).__name__, e)

    def _defer_agent_sigterm(self):
        """Under torchrun, SIGTERM ends training at the step() boundary (or in
        the collective that fails first) instead of at once. torchrun's agent
        stops every local worker with SIGTERM within PET_MONITOR_INTERVAL of
        one dying (SIGKILL 30 s later): SIGTERM's default action killed
        rank 0 before its dying gasp whenever the agent was quicker than
        rank 0's failing collective, and the restarted workers lost every
        step since the last periodic checkpoint (e2e rank crash: 7 and 9).
        A watchdog bounds the deferral (TRAINGUARD_DUMP_TIMEOUT +
        TRAINGUARD_EXIT_GRACE; none where TRAINGUARD_EXIT_GRACE is 0): a
        trainer that never reaches a step() boundary still ends, and
        torchrun's SIGKILL bounds it anyway."""
        env = os.environ if self._env is None else self._env
        if not env.get("TORCHELASTIC_RUN_ID"):
            return
        cfg = self.config
        grace = self._dump_timeout() + cfg.exit_grace

        def watchdog():
            if cfg.exit_grace > 0:
                exiting.start_watchdog(grace)

        if self._sigterm.keep(watchdog):
            log.info("trainguard: rank %d under torchrun: SIGTERM from its agent ends training at the next step "
                     "boundary, after rank 0 commits the last completed step", cfg.rank)

    def _end_on_sigterm(self):
        """SIGTERM under torchrun at a step() boundary (_defer_agent_sigterm):
        the agent stops this worker group (a local worker died, or torchrun
        itself is stopping). As when a peer dies, global rank 0 commits the
        step just completed; the rank exits 143, as SIGTERM would have."""
        log.warning("trainguard: rank %d: SIGTERM from torchrun's agent; ending training after step %d (exit %d)",
                    self.config.rank, self._step, proto.EXIT_CODE)
        self._stop.set()  # the listener: no request is answered any more
        try:
            self._dying_gasp()
        except Exception as e:  # the exit matters more than the gasp
            log.error("trainguard: no dying-gasp checkpoint: %s: %s", type(e).__name__, e)
        exiting.flush_output()
        raise SystemExit(proto.EXIT_CODE)

    def _serve_status(self):
        env = os.environ if self._env is None else self._env
        port = status.port_from_env(env)
        if self.config.local_rank != 0 or port == 0:
            return
        if status.host_network():
            # The controller never reads a host-network pod, and the port
            # would be open on the node's addresses.
            log.info("trainguard: a host-network pod: not serving the work-at-risk status on port %d", port)
            return
        try:
            self._status = status.Server(port, self.status, timeout=status.timeout_from_env(env))
        except OSError as e:
            log.warning("trainguard: not serving the work-at-risk status on port %d: %s", port, e)

    def status(self):
        """What a preemption now would cost (served by _status.py): this
        process's step, the job's last committed checkpoint (this process's
        own, else the pointer global rank 0 wrote) and how long the last save
        took."""
        committed_step, committed_at = self._last_step_committed, self._last_commit_at
        if committed_at is None:
            ptr = storage.read_pointer(self.config.checkpoint_dir)
            if ptr is not None and isinstance(ptr.get("step"), int) and isinstance(ptr.get("saved_at"), (int, float)):
                committed_step, committed_at = ptr["step"], ptr["saved_at"]
        return {"format": status.FORMAT, "now": time.time(), "step": self._step,
                "committed_step": committed_step, "committed_at": committed_at,
                "save_seconds": self._last_save_seconds}

    def close(self):
        """Stop listening (the thread is a daemon; this is for tests and clean exits)."""
        self._stop.set()
        self._hooks.uninstall()
        if self._status is not None:
            self._status.close()
            self._status = None
        self._writer.wait()  # a periodic save in flight is finished, not dropped
        if self._listener is not None:
            self._listener.join(timeout=5)
            self._listener = None
        if self._waker is not None:
            self._waker.close()
            self._waker = None
        for d in [self._sig, self._sig_parent, self._root] + list(self._siblings.values()):
            if d is not None:
                d.close()
        self._sig = self._sig_parent = self._root = None
        self._siblings = {}

    @property
    def resume(self):
        """True when a valid checkpoint exists (all ranks agree)."""
        return self._resolve() is not None

    def load_ckpt(self):
        """Restore every registered object from the chosen checkpoint. Returns
        {'step', 'checkpoint', 'saved_at'}, or None (fresh start) when there is none."""
        chosen = self._resolve()
        if chosen is None:
            log.warning("trainguard: no usable checkpoint in %s; starting fresh", self.config.checkpoint_dir)
            return None
        name, payload = chosen
        if payload is None:  # loaded before: read it again
            chosen = self._load_named(name)
            if chosen is None:
                return None
            payload = chosen[1]
        self._resolved = (name, None)  # drop the payload: it can be large
        states = payload["states"]
        for key, obj in self._objects.items():
            if key not in states:
                log.warning("trainguard: checkpoint %s has no %r; it keeps its initial value", name, key)
                continue
            _restore(obj, states[key])
        for key in states:
            if key not in self._objects:
                log.warning("trainguard: checkpoint %s has %r, which nobody registered", name, key)
        if payload.get("rng") is not None:  # a peer's: its torch RNG state too
            storage._torch().set_rng_state(payload["rng"])
        self._step = payload["step"]
        if "from" not in payload:  # a peer's state is in no checkpoint
            self._last_step_committed = self._step
        self._steps_at_boundary = self._optimizer_steps.count
        log.info("trainguard: resumed from %s at step %d", name, self._step)
        return {"step": payload["step"], "checkpoint": name, "saved_at": payload.get("saved_at")}

    @property
    def generation(self):
        """This incarnation's fence generation (global rank 0; 0 elsewhere)."""
        return self._generation

    def save_ckpt(self):
        """Save a checkpoint now (periodic saves). Rank 0 writes; other ranks
        return None. Returns the checkpoint file name. Raises trainguard.Fenced
        when a newer incarnation of the job has started: this process is
        stale (e.g. its node was partitioned and its pod replaced) and
        nothing it saves will be resumed, so by default it stops."""
        self._refuse_if_read_only()
        if self.config.rank != 0:
            return None
        name = self._save()
        storage.prune(self._root_dir() or self.config.checkpoint_dir, keep=self.config.keep)
        return name

    def periodic(self, steps=0, seconds=0.0):
        """Checkpoint in the background every `steps` optimizer steps and/or
        every `seconds` of training (0: off), at the end of a step() block.
        Defaults: TRAINGUARD_CHECKPOINT_EVERY_STEPS and
        TRAINGUARD_CHECKPOINT_EVERY (a duration such as 60s)."""
        self._schedule = periodic.Schedule(steps, seconds)
        return self

    @property
    def periodic_stats(self):
        """{'saves', 'failures', 'waited', 'stall_seconds'} of the background saves:
        waited counts saves that fell due while the previous one still wrote;
        stall_seconds is the training time they took (copies and such waits)."""
        w = self._writer
        return {"saves": w.saves, "failures": w.failures, "waited": w.waited, "stall_seconds": w.stall_seconds}

    @contextlib.contextmanager
    def step(self):
        """Wrap one optimizer step: a requested checkpoint is taken right after
        the block, never in the middle of a step; so is a periodic one, in
        the background. Raises trainguard.Fenced when a background save was
        refused because a newer incarnation of the job started. After this
        pod's termination checkpoint it ends training: by default it raises
        SystemExit(143) once the agent is done (see exit()). A collective
        in the block that fails because a peer is gone ends this rank with
        SystemExit(138), retryable, after the dying gasp (replicated())."""
        try:
            yield
        except Exception as e:
            # A collective that fails because a peer of this stopping pod
            # already exited is the end of training, not a crash.
            self._watch_own_ack()
            if self._termination is not None:
                self._terminate()
            why = peer.classify(e)
            if why is not None and self._recover(e, why):
                return  # the group is whole again: steps() yields this step again
            if why is not None:
                self._on_peer_lost(e, why, True, traceback=True)
                raise SystemExit(peer.EXIT_PEER_LOST) from e
            raise
        self._step += 1
        self._steps_at_boundary = self._optimizer_steps.count
        self._writer.raise_if_fenced()
        if self._pending:
            self._answer_requests()
        elif self._periodic_due():
            self._save_in_background()
        if self._termination is not None:
            self._terminate()
        elif self._sigterm.received and self._sigterm.kept:
            self._end_on_sigterm()

    def steps(self, total):
        """The steps to train, global_step up to total: `for step in
        migrator.steps(total): with migrator.step(): ...`. After an
        in-process recovery (docs/checkpoint-protocol.md) the step that was
        abandoned comes again; only a loop driven so recovers in process."""
        self._driven = True
        try:
            while self._step < total:
                yield self._step
        finally:
            self._driven = False

    def _recover(self, exc, why):
        """A peer is gone: re-form in process when supervised (_reform.py)."""
        try:
            return reform.recover(self, self._environ(), exc, why)
        except reform.Refused as e:
            self._peer_lost_handled = True
            log.error("trainguard: rank %d: %s; exiting %d without a dying gasp (the returning rank runs other code): "
                      "the job restarts from the checkpoint", self.config.rank, e, peer.EXIT_PEER_LOST)
            exiting.flush_output()
            raise SystemExit(peer.EXIT_PEER_LOST) from exc

    def _capture_for_peer(self, obj):
        return _capture(obj)

    def exit(self, info=None):
        """The default termination hook: stop the listener, finish a save in
        flight, leave the torch.distributed process group, flush logs and
        raise SystemExit(143) from the step() boundary, so the user's
        `finally` blocks and atexit handlers run. A watchdog ends the
        process with 143 if it has not ended TRAINGUARD_EXIT_GRACE (10 s)
        later."""
        info = info or {}
        log.info("trainguard: training stopped after the termination checkpoint at step %d (agent: %s); exiting %d",
                 self._step, info.get("outcome") or info.get("why", "?"), proto.EXIT_CODE)
        if self.config.exit_grace > 0:
            exiting.start_watchdog(self.config.exit_grace)
        self.close()
        exiting.shutdown_distributed(_initialized_dist())
        exiting.flush_output()
        raise SystemExit(proto.EXIT_CODE)

    # ------------------------------------------------------------ internals

    def _on_peer_lost(self, exc, why, main, traceback=False):
        """A collective failed because a peer is gone: say so, take the dying
        gasp (rank 0), and make sure the exit that follows is not stuck."""
        if self._peer_lost_handled:
            return
        self._peer_lost_handled = True
        cfg = self.config
        log.error("trainguard: rank %d: a peer is gone (%s: %s: %s); exiting %d (retryable) after step %d",
                  cfg.rank, why, type(exc).__name__, exc, peer.EXIT_PEER_LOST, self._step,
                  exc_info=exc if traceback else None)
        self._stop.set()  # the listener: no request is answered any more
        try:
            self._dying_gasp()
        except Exception as e:  # the exit code matters more than the gasp
            log.error("trainguard: no dying-gasp checkpoint: %s: %s", type(e).__name__, e)
        if main and cfg.exit_grace > 0:
            exiting.start_watchdog(cfg.exit_grace, peer.EXIT_PEER_LOST)
        exiting.flush_output()

    def _dump_timeout(self):
        env = os.environ if self._env is None else self._env
        return max(0.0, proto._duration_seconds(env.get("TRAINGUARD_DUMP_TIMEOUT"), 5.0))

    def _gasp_refusal(self):
        """Why rank 0 must not commit its state as the last completed step, or ""."""
        parts = peer.sharded(self._objects)
        if parts:
            return ("the state is sharded (%s): rank 0 does not hold all of it" % ", ".join(parts))
        if self._replicated is False:
            return "the state is declared not replicated (migrator.replicated(False))"
        if not self._replicated and peer.data_parallel(self._objects) is None:
            return ("the SDK cannot tell that every rank holds the same state (no DistributedDataParallel "
                    "registered); a data-parallel trainer declares it with migrator.replicated()")
        if self._optimizer_steps.watched == 0:
            return "no optimizer is registered, so the SDK cannot tell a completed step from a torn one"
        if self._optimizer_steps.count != self._steps_at_boundary:
            return ("the optimizer stepped after step %d completed but the step was not marked done "
                    "(migrator.step() block): the state is between two steps" % self._step)
        if self._step == 0:
            return "no step has completed yet"
        if not os.path.isdir(self.config.checkpoint_dir):
            return "checkpoint dir %s does not exist" % self.config.checkpoint_dir
        return ""

    def _dying_gasp(self):
        """Global rank 0 commits the last completed step through the fenced
        commit path; every other rank leaves it to rank 0 (the state is
        replicated, or nobody saves). All of it, the checks included (they
        may walk every live object to find a DistributedDataParallel), is
        bounded by TRAINGUARD_DUMP_TIMEOUT."""
        cfg = self.config
        timeout = self._dump_timeout()
        if cfg.rank != 0 or cfg.world_size < 2 or timeout <= 0:
            return
        step, started, box = self._step, time.monotonic(), {}

        def gasp():
            try:
                box["refused"] = self._gasp_refusal()
                if box["refused"]:
                    return
                self._writer.wait()  # a periodic save in flight: it may be this very step
                if self._last_step_committed == step:
                    box["name"] = None
                    return
                self._writer.raise_if_fenced()
                self._claim()
                box["name"] = self._write(self._payload(copy_state=False))
            except Exception as e:
                box["error"] = e

        self._state = "saving"
        worker = threading.Thread(target=gasp, name="trainguard-dying-gasp", daemon=True)
        worker.start()
        worker.join(timeout)
        took = time.monotonic() - started
        if worker.is_alive():
            log.error("trainguard: no dying-gasp checkpoint: step %d not committed within %gs "
                      "(TRAINGUARD_DUMP_TIMEOUT); exiting without it", step, timeout)
        elif "error" in box:
            log.error("trainguard: no dying-gasp checkpoint: %s: %s", type(box["error"]).__name__, box["error"])
        elif box.get("refused"):
            log.warning("trainguard: no dying-gasp checkpoint: %s", box["refused"])
        elif box["name"] is None:
            log.info("trainguard: dying gasp: step %d is already committed", step)
        else:
            log.warning("trainguard: dying gasp: committed %s, the last completed step %d, in %.2fs",
                        box["name"], step, took)

    def _refuse_if_read_only(self):
        if self._read_only:
            raise RuntimeError("trainguard: this Migrator is read-only (read_only()): it never saves, so it never "
                               "fences the job's trainer; use a Migrator without read_only to write checkpoints")

    def _root_dir(self):
        """The checkpoint directory, opened once (O_NOFOLLOW|O_DIRECTORY);
        None while it does not exist."""
        if self._root is None:
            try:
                self._root = proto.Dir.open(self.config.checkpoint_dir)
            except FileNotFoundError:
                return None
        return self._root

    def _own_signal(self):
        """This pod's signal dir, opened once through the checkpoint
        directory's descriptor, one component at a time, none a symlink
        (a planted .trainguard symlink once led heartbeats and acks out of
        the job's directory). Local rank 0 creates it; other processes wait
        for it (None until then). The listener and the training thread
        both ask: one opens it."""
        if self._sig is not None:
            return self._sig
        with self._open_lock:
            if self._sig is None:
                self._open_signal()
            return self._sig

    def _open_signal(self):
        cfg = self.config
        create = cfg.local_rank == 0
        base, sig = os.path.abspath(cfg.checkpoint_dir), os.path.abspath(cfg.signal_dir)
        rel = os.path.relpath(sig, base)
        root = self._root_dir()
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
                self._sig = parent.sub(os.path.basename(sig), create)
            except BaseException:
                if parent is not root:
                    parent.close()
                raise
        except FileNotFoundError:
            if create:
                raise
            return
        self._sig_parent = parent if parent is not root else None

    @property
    def _own_key(self):
        """This pod's signal dir's name: the key of its requests among its siblings'."""
        return os.path.basename(os.path.abspath(self.config.signal_dir))

    def _claim(self):
        """Global rank 0 claims this incarnation's generation once, when it
        starts listening or at its first save, never for a load: an
        evaluation job or a debug pod that loads must not fence the live
        trainer (docs/checkpoint-protocol.md, "Fencing")."""
        self._refuse_if_read_only()
        cfg = self.config
        if self._generation or cfg.rank != 0 or self._root_dir() is None:
            return
        self._generation, self._line = fence.claim_in_line(self._root, pod=cfg.pod, uid=cfg.pod_uid)
        log.info("trainguard: incarnation generation %d%s in %s", self._generation,
                 " (line %s)" % self._line if self._line else "", cfg.checkpoint_dir)

    def _payload(self, copy_state):
        states = {k: _capture(o) for k, o in self._objects.items()}
        if copy_state:
            states = periodic.snapshot(states, storage.use_torch(self.config.serializer))
        return {"format": storage.FORMAT_VERSION, "step": self._step, "saved_at": time.time(),
                "world_size": self.config.world_size, "states": states}

    def _save(self):
        self._writer.wait()  # a background save in flight finishes first: one writer at a time
        self._writer.raise_if_fenced()
        self._state = "saving"
        try:
            self._claim()
            name = self._write(self._payload(copy_state=False))
        finally:
            self._state = "training"
        return name

    def _write(self, payload):
        started = time.monotonic()
        try:
            name, size = storage.write_checkpoint(self.config, payload, self._generation, self._root_dir(),
                                                  line=self._line)
        except fence.Fenced as e:
            self.refused_commits += 1
            log.error("trainguard: commit %d refused: %s", self.refused_commits, e)
            raise
        self._last_ckpt, self._last_bytes = name, size
        self._last_step_committed = payload["step"]
        self._last_commit_at, self._last_save_seconds = payload["saved_at"], time.monotonic() - started
        log.info("trainguard: saved %s at step %d (%d bytes)", name, payload["step"], size)
        return name

    def _periodic_due(self):
        if self._schedule is None:
            cfg = self.config
            self._schedule = periodic.Schedule(cfg.every_steps, cfg.every_seconds)
        self._schedule.begin(self._step - 1)  # the step this process started (or resumed) at
        return self.config.rank == 0 and not self._read_only and self._schedule.due(self._step)

    def _save_in_background(self):
        """Copy the state now (the only part training waits for, unless the
        previous background save still writes: then it waits for that one
        first, so every due checkpoint is taken), write it in a thread."""
        started = time.monotonic()
        if self._writer.busy():
            self._writer.waited += 1
            self._writer.wait()
        self._writer.raise_if_fenced()
        self._claim()
        payload = self._payload(copy_state=True)
        self._writer.stall_seconds += time.monotonic() - started
        self._schedule.saved(self._step)
        directory, keep = self._root_dir() or self.config.checkpoint_dir, self.config.keep

        def write():
            self._write(payload)
            storage.prune(directory, keep=keep)

        self._writer.start(write)

    def _resolve(self):
        """Choose the checkpoint once. With torch.distributed initialised, rank 0
        chooses and broadcasts the name, so every rank loads the same file even
        if rank 0 had to skip a corrupt one."""
        if self._resolved is not _UNRESOLVED:
            return self._resolved
        dist = _initialized_dist()
        if dist is not None and reform.generation(self._environ()) > 1:
            chosen = self._from_peer(dist)
            if chosen is not _UNRESOLVED:
                self._resolved = chosen
                return chosen
        if dist is not None and dist.get_world_size() > 1:
            chosen = self._pick() if dist.get_rank() == 0 else None
            box = [chosen[0] if chosen else None]
            dist.broadcast_object_list(box, src=0)
            if dist.get_rank() != 0 and box[0] is not None:
                chosen = self._load_named(box[0])
        else:
            chosen = self._pick()
        self._resolved = chosen
        return chosen

    def _from_peer(self, dist):
        """A restarted trainer's state from a survivor's memory, or the
        checkpoint when the state was refused; _UNRESOLVED: nobody holds
        one (every trainer restarted), the checkpoint as always."""
        what, detail = reform.exchange(dist, self._objects, self._step, False, _capture)
        if what == "received":
            log.info("trainguard: rank %d: the state of step %d from rank %d's memory (%d bytes), no checkpoint read",
                     dist.get_rank(), detail["step"], detail["from"], detail["bytes"])
            return "peer:rank%d" % detail["from"], detail
        if what == "refused":
            log.error("trainguard: %s; nothing of it is loaded: loading the checkpoint", detail)
            return self._pick()  # alone: the survivors are leaving
        log.info("trainguard: no surviving rank holds the state; loading the checkpoint")
        return _UNRESOLVED

    def _pick(self):
        """Loading takes no generation: an evaluation job or a debug pod
        that loads must not fence the live trainer (issue 31)."""
        directory = self._root_dir()
        if directory is None:
            return None
        for name in storage.candidates(directory):
            chosen = self._load_named(name)
            if chosen is not None:
                return chosen
        return None

    def _load_named(self, name):
        try:
            return name, storage.load_checkpoint(self._root_dir() or self.config.checkpoint_dir, name, self.config.job)
        except storage.CorruptCheckpoint as e:
            log.warning("trainguard: skipping unusable checkpoint (falling back to the previous one): %s", e)
            return None

    def _answer_requests(self):
        with self._lock:
            requests, self._pending = self._pending, {}
            # Handled from now on, not only after the ack: the listener
            # scans while the save runs, and would otherwise queue the same
            # request again and answer it a second time a step later.
            for directory, key in requests.items():
                self._mark_handled(directory, key)
        log.info("trainguard: checkpoint requested (%s), saving at step %d",
                 ", ".join("generation %d" % g for g, _ in requests.values()), self._step)
        own = requests.get(self._own_key)
        if own and self.config.after_checkpoint == "exit":
            self._sigterm.install()  # this pod stops: SIGTERM must not cut the save or the exit short
        try:
            name, error = self._save(), ""
        except Exception as e:  # disk full, permission: the agent must hear about it
            name, error = None, "%s: %s" % (type(e).__name__, e)
            log.error("trainguard: checkpoint failed: %s", error)
        self._ack(requests, name, error)
        if not error:  # after the ack: deleting an old checkpoint is not the stopping pod's wait
            storage.prune(self._root_dir() or self.config.checkpoint_dir, keep=self.config.keep)
        if own and not error:
            self._note_termination(own[0], own[1], name)
        elif own:
            self._sigterm.restore()  # no checkpoint: training goes on, so does SIGTERM's default

    def _ack(self, requests, name, error):
        for directory, (generation, nonce) in requests.items():
            ack = {"generation": generation, "nonce": nonce, "status": "error" if error else "ok",
                   "step": self._step, "checkpoint": name or "", "bytes": self._last_bytes if name else 0,
                   "error": error, "acked_at": time.time()}
            try:
                self._request_dir(directory).write_json_atomic(proto.ACK_FILE, ack)
            except (OSError, AttributeError) as e:
                log.error("trainguard: cannot acknowledge generation %d in %s: %s", generation, directory, e)
            with self._lock:
                self._mark_handled(directory, (generation, nonce))

    def _terminate(self):
        """This pod is stopping and its checkpoint is acknowledged: hold the
        old way (TRAINGUARD_AFTER_CHECKPOINT=hold), or wait until the agent
        is done (bounded, TRAINGUARD_EXIT_WAIT; SIGTERM ends the wait too)
        and call the termination hook, exit() unless the user set one."""
        generation, nonce, name = self._termination
        self._termination = None
        if self.config.after_checkpoint == "hold":
            self._hold(name)
            return
        cfg = self.config
        self._state = "holding"
        self._sigterm.install()
        log.info("trainguard: termination checkpoint %s acknowledged at step %d (generation %d); waiting up to %gs "
                 "for the agent to finish", name, self._step, generation, cfg.exit_wait)
        done, why = exiting.wait_done(cfg.signal_dir, generation, nonce, cfg.exit_wait,
                                      min(cfg.poll_interval, 0.05), lambda: self._ack_pending(name), self._sigterm)
        if why == "timeout":
            log.warning("trainguard: no %s from the agent within %gs; stopping anyway", proto.DONE_FILE, cfg.exit_wait)
        info = {"generation": generation, "step": self._step, "checkpoint": name,
                "outcome": (done or {}).get("outcome", ""), "why": why}
        (self.termination_hook or self.exit)(info)  # exit() raises SystemExit with the flag still set
        self._sigterm.restore()
        self._state = "training"
        log.warning("trainguard: the termination hook returned; training goes on")

    def _ack_pending(self, name):
        """Another pod's request while this one stops: this checkpoint answers it."""
        if self._pending and name:
            with self._lock:
                requests, self._pending = self._pending, {}
            self._ack(requests, name, "")

    def _own_ack(self):
        """(generation, nonce) of the ack in this pod's signal dir, if it
        says ok and answers the request there, which the agent still waits
        for (same generation and nonce, not expired): a forged ack with no
        request behind it once stopped the trainer with 143 (issue 31)."""
        sig = self._own_signal()
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
        return gen, nonce

    def _watch_own_ack(self):
        """Every process learns that its pod's termination checkpoint was
        acknowledged, wherever global rank 0 runs (a worker pod's request is
        answered by rank 0 in another pod)."""
        if self._own_ack_base is not None and self._termination is None:
            gen, nonce = self._own_ack()
            self._note_termination(gen, nonce, "")

    def _note_termination(self, gen, nonce, name):
        """Rank 0 (which wrote the ack) and the listener (which reads it) may
        both see one ack: the first makes it the termination, once. An ack
        is one request's by (generation, nonce): at the largest generation
        a pod's next termination differs from its last by the nonce only."""
        if self.config.after_checkpoint == "continue":
            return
        key = (gen, nonce)
        with self._lock:
            base = self._own_ack_base or (0, "")
            if gen and key != base and gen >= base[0]:
                self._own_ack_base, self._termination = key, (gen, nonce, name)
            elif name and self._termination is not None and self._termination[:2] == key:
                self._termination = (gen, nonce, name)

    def _hold(self, name):
        """The pod is stopping: any step taken now would be lost, so wait here
        for SIGTERM. Bounded, in case nobody terminates us (a manual prestop)."""
        cfg = self.config
        log.info("trainguard: checkpoint %s written for termination at step %d; holding training "
                 "(up to %gs) until the pod stops", name, self._step, cfg.hold_timeout)
        self._state = "holding"
        until = time.monotonic() + cfg.hold_timeout
        while time.monotonic() < until:
            time.sleep(cfg.poll_interval)
            if self._pending:  # another pod's request: this checkpoint already answers it
                with self._lock:
                    requests, self._pending = self._pending, {}
                self._ack(requests, name, "")
        self._state = "training"
        log.warning("trainguard: still running %gs after a termination checkpoint; resuming training",
                    cfg.hold_timeout)

    def _listen(self):
        cfg = self.config
        next_beat = next_peers = 0.0
        while not self._stop.is_set():
            if not self._waker.wait(cfg.poll_interval):
                self._stop.wait(0 if self._waker.active else cfg.poll_interval)
            if self._stop.is_set():
                return
            try:
                if time.time() >= next_beat:
                    self._write_heartbeat()
                    next_beat = time.time() + cfg.heartbeat_interval
                if cfg.rank == 0:
                    self._scan_requests()
                self._watch_own_ack()
                if cfg.world_size > 1 and cfg.local_rank == 0 and time.time() >= next_peers:
                    # One rank per pod, every PEER_WATCH_INTERVAL: the first
                    # survivor to exit closes its own connections, which
                    # fails the collectives of the others.
                    self._watch_peers()
                    next_peers = time.time() + PEER_WATCH_INTERVAL
            except Exception as e:  # the listener must outlive a flaky volume
                log.warning("trainguard: listener: %s: %s", type(e).__name__, e)

    def _write_heartbeat(self):
        cfg = self.config
        if cfg.local_rank != 0:
            return
        self._own_signal().write_json_atomic(proto.HEARTBEAT_FILE, {
            "pid": os.getpid(), "time": time.time(), "state": self._state,
            "step": self._step, "generation": self._handled_generation(self._own_key), "rank": cfg.rank,
            "started": self._started,
        })

    def _watch_peers(self):
        """Ends this rank retryably when a peer it trained with restarted.
        Its collective may never fail: a peer's socket kept open (by a process
        that inherited it, a core dump in progress, a half-open connection)
        left a survivor blocked in gloo's all_reduce for its whole timeout
        (30 min by default) while the peer had restarted in place."""
        if self._reforming:
            return  # the restarted peer is the one awaited
        beats = {}
        for name, d in self._request_dirs():
            if name == self._own_key:
                continue
            try:
                beats[name] = d.read_json(proto.HEARTBEAT_FILE)
            except Exception:  # an unreadable heartbeat says nothing
                continue
        restarted = self._peers.observe(beats, self._step, self._started)
        if restarted is None:
            return
        exc = peer.PeerRestarted("the trainer of %s restarted (a new incarnation started at %s) while rank %d waited "
                                 "for it after step %d" % (restarted, time.strftime("%H:%M:%S", time.gmtime(
                                     self._peers.latest[restarted])), self.config.rank, self._step))
        self._on_peer_lost(exc, "a peer restarted", False)
        os._exit(peer.EXIT_PEER_LOST)

    def _request_dirs(self):
        """(name, Dir) of the signal dirs rank 0 answers: a single process
        watches its own; with more, every pod's of the job, siblings in the
        job's own checkpoint directory. Each is opened through its parent's
        descriptor without following a symlink: a symlink among them could
        lead rank 0 to acknowledge another job's request."""
        own = self._own_signal()
        dirs = [(self._own_key, own)] if own is not None else []
        parent = self._sig_parent or self._root
        if self.config.world_size > 1 and parent is not None and own is not None:
            try:
                entries = [e.name for e in parent.entries() if e.is_dir(follow_symlinks=False)]
            except OSError:
                entries = []
            for name in set(self._siblings) - set(entries):
                self._siblings.pop(name).close()
            for name in entries:
                if name == self._own_key:
                    continue
                d = self._sibling(parent, name)
                if d is not None:
                    dirs.append((name, d))
            self._waker.watch(parent.path)
        for _, d in dirs:
            self._waker.watch(d.path)
        return sorted(dirs, key=lambda t: t[0])

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

    def _request_dir(self, name):
        return self._sig if name == self._own_key else self._siblings.get(name)

    def _warn_once(self, name, fmt, *args):
        if name not in self._warned:
            self._warned.add(name)
            log.warning(fmt, *args)

    def _scan_requests(self):
        """Each pod's request is judged on its own: a malformed one (a
        "deadline": "soon" once raised here and hid every pod sorted after it)
        is logged once and skipped."""
        now = time.time()
        for name, d in self._request_dirs():
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
        with self._lock:
            if name not in self._handled:
                # First look at this dir: a request acknowledged before we
                # started is done. Only an ack that answers it (its
                # generation and nonce) says so: a planted ack of a huge
                # generation once silenced the pod's every request.
                ack = d.read_json(proto.ACK_FILE) or {}
                done = ack.get("generation") == gen and ack.get("nonce", "") == nonce
                self._handled[name] = [key] if done else []
            # Known by (generation, nonce), not by the pod's newest
            # generation: at 2^53-1 the agent's every request has the same
            # generation, and a pod's second request was never answered.
            if key in self._handled[name] or self._pending.get(name) == key:
                return
            if not proto.live(req, now):
                # Its agent has given up (e.g. the request predates this process).
                self._mark_handled(name, key)
                log.info("trainguard: ignoring expired request generation %d in %s", gen, d.path)
                return
            self._pending[name] = key

    def _mark_handled(self, name, key):
        """Record a request (generation, nonce) answered or dismissed; under self._lock."""
        keys = self._handled.setdefault(name, [])
        if key not in keys:
            keys.append(key)
            del keys[:-_HANDLED_KEEP]

    def _handled_generation(self, name):
        """The largest generation handled in a signal dir (the heartbeat's
        generation, which the agent's next request exceeds when it can)."""
        return max((g for g, _ in self._handled.get(name, ())), default=0)


def _initialized_dist():
    torch = storage._torch()
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _capture(obj):
    if hasattr(obj, "state_dict"):
        return obj.state_dict()
    return dict(obj) if isinstance(obj, dict) else list(obj)


def _restore(obj, state):
    if hasattr(obj, "load_state_dict"):
        obj.load_state_dict(state)
    elif isinstance(obj, dict):
        obj.clear()
        obj.update(state)
    else:
        obj[:] = state
