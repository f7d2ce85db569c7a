"""The Migrator: the SDK's public API, composed of its parts.

    _state.State               the registered objects and the step (capture, restore)
    _checkpoints.Checkpoints   this process's saves and loads, the fence generation
    _periodic.Periodic         periodic checkpoints in the background
    _shards                    sharded state: every rank saves its part, at one step
    _requests.Requests         the agent's requests and the acks (SignalDirs: where)
    _requests.NowRequests      checkpoint-now requests: commit a step, train on
    _exit.Stopping             this pod's termination: the wait for the agent, SIGTERM
    _peer.PeerLoss             a peer's death: the dying gasp, the retryable exit
    _reform.Recovery           a peer's death under the supervisor: re-form in process

The facade holds the listener thread and the step() boundary, where the
parts meet; each part takes the others it needs at construction.
"""

import contextlib
import logging
import os
import threading
import time

from . import _checkpoints as checkpoints
from . import _exit as exiting
from . import _peer as peer
from . import _periodic as periodic
from . import _protocol as proto
from . import _reform as reform
from . import _requests as requests
from . import _shards as shards
from . import _state as state
from . import _status as status
from . import _storage as storage
from . import _wake as wake

log = logging.getLogger("trainguard")

# How often each pod's trainer reads its peers' heartbeats (PeerLoss.watch):
# a rank waiting on a peer that restarted ends within about this much.
PEER_WATCH_INTERVAL = 2.0


class Migrator:
    """Checkpoints registered objects when trainguard-agent asks (pod stopping)
    or when save_ckpt() is called, and restores them on the next start."""

    def __init__(self, env=None, read_only=False):
        self._settings = proto.Settings(env)  # the environment, read when first needed
        self._state = state.State()
        self._checkpoints = checkpoints.Checkpoints(self._settings, self._state)
        self._checkpoints.read_only = bool(read_only)
        self._periodic = periodic.Periodic(self._settings, self._state, self._checkpoints)
        self._dirs = requests.SignalDirs(self._settings, self._checkpoints.root)
        self._requests = requests.Requests(self._settings, self._dirs)
        self._now = requests.NowRequests(self._settings, self._dirs)
        self._stopping = exiting.Stopping(self._settings, self._state, self._requests)
        self._stop = threading.Event()  # ends the listener
        self._peer = peer.PeerLoss(self._settings, self._state, self._checkpoints.save, self._stop.set)
        self._peer.pod_stopping = self._requests.own_stop_requested
        self._recovery = reform.Recovery(self._settings, self._state, self._peer)
        self._checkpoints.from_peer = self._recovery.received
        self._coordinator = shards.Coordinator()
        self._listener = None
        self._status = None  # the work-at-risk server (_status.py), local rank 0 while listening
        # Called with {generation, step, checkpoint, outcome, why} instead of
        # exit() once a termination checkpoint is acknowledged and the agent
        # is done; if it returns, training goes on.
        self.termination_hook = None

    # ------------------------------------------------------------------ API

    @property
    def config(self):
        return self._settings.config

    @property
    def global_step(self):
        """Optimizer steps completed (counted by step(), restored by load_ckpt())."""
        return self._state.step

    @property
    def generation(self):
        """This incarnation's fence generation (global rank 0; 0 elsewhere)."""
        return self._checkpoints.generation

    @property
    def refused_commits(self):
        """Saves refused because a newer incarnation started."""
        return self._checkpoints.refused_commits

    def register(self, name, obj):
        """Register an object to checkpoint: anything with state_dict() and
        load_state_dict(), or a dict or list (restored in place). Register
        everything before load_ckpt()."""
        self._state.register(name, obj)

    def replicated(self, value=True):
        """Declare that every rank holds the same registered state after each
        completed step (data parallel: gradients averaged by hand; a
        registered DistributedDataParallel, or the module it wraps, says so
        by itself), or, with False, that it does not. When a peer dies, a
        surviving global rank 0 then commits the last completed step before
        it exits (the dying gasp), so the crash loses no step."""
        self._state.replicated = bool(value)
        return self

    def read_only(self):
        """Make this Migrator a reader (an evaluation job, a debug pod): it
        loads checkpoints and writes nothing on the volume. It takes no
        generation, so it never fences the job's trainer; listening() does
        nothing and save_ckpt() raises. Call it before anything else. Also
        Migrator(read_only=True)."""
        self._checkpoints.read_only = True
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
        self._peer.hooks.install()
        cfg = self.config
        if self._checkpoints.read_only:
            log.info("trainguard: read-only: not listening for checkpoint requests in %s", cfg.checkpoint_dir)
            return self
        self._stopping.defer_agent_sigterm()
        self._recovery.arrive()
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
            self._dirs.own()  # creates it; refuses a symlink on the way
        self._stopping.begin()
        self._checkpoints.claim()
        self._peer.started = self._now.started = time.time()
        self._requests.heartbeat(self._state.phase, self._state.step, self._peer.started)
        self._dirs.waker = wake.Waker()
        self._listener = threading.Thread(target=self._listen, name="trainguard-listener", daemon=True)
        self._listener.start()
        if cfg.local_rank == 0:
            self._status = status.serve(self._settings.env, self.status, checkpoint=self._request_now,
                                        min_interval=cfg.now_interval)
        return self

    def status(self):
        """What a preemption now would cost (served by _status.py): this
        process's step, the job's last committed checkpoint (this process's
        own, else the pointer global rank 0 wrote) and how long the last save
        took."""
        committed_step, committed_at = self._checkpoints.committed()
        return {"format": status.FORMAT, "now": time.time(), "step": self._state.step,
                "committed_step": committed_step, "committed_at": committed_at,
                "save_seconds": self._checkpoints.save_seconds}

    def _request_now(self, reason):
        """A checkpoint-now request that came to this pod's status port,
        filed in its signal dir for global rank 0 (who reads every pod's);
        returns the step this process is at, which the commit will reach."""
        own = self._dirs.own()
        if own is None:
            raise OSError("no signal directory yet")
        step = self._state.step
        own.write_json_atomic(proto.NOW_FILE, {"nonce": os.urandom(16).hex(), "step": step,
                                               "requested_at": time.time(), "reason": reason})
        log.info("trainguard: checkpoint now requested at step %d: %s", step, reason or "no reason given")
        return step

    def close(self):
        """Stop listening (the thread is a daemon; this is for tests and clean exits)."""
        self._stop.set()
        self._peer.hooks.uninstall()
        if self._status is not None:
            self._status.close()
            self._status = None
        self._checkpoints.writer.wait()  # a periodic save in flight is finished, not dropped
        if self._listener is not None:
            self._listener.join(timeout=5)
            self._listener = None
        if self._dirs.waker is not None:
            self._dirs.waker.close()
            self._dirs.waker = None
        self._dirs.close()
        self._checkpoints.close()

    @property
    def resume(self):
        """True when a valid checkpoint exists (all ranks agree)."""
        return self._checkpoints.resolve() is not None

    def load_ckpt(self):
        """Restore every registered object from the chosen checkpoint. Returns
        {'step', 'checkpoint', 'saved_at'}, or None (fresh start) when there is none."""
        chosen = self._checkpoints.load()
        if chosen is None:
            return None
        name, payload = chosen
        self._state.restore(payload["states"], payload["step"], name, payload.get("sharded") or ())
        reform.restore_rng(payload)
        log.info("trainguard: resumed from %s at step %d", name, payload["step"])
        return {"step": payload["step"], "checkpoint": name, "saved_at": payload.get("saved_at")}

    def save_ckpt(self):
        """Save a checkpoint now (periodic saves). Rank 0 writes; other ranks
        return None. With sharded state (a ZeroRedundancyOptimizer) it is a
        collective: every rank must call it, writes its part and returns
        the name. Returns the checkpoint file name. Raises trainguard.Fenced
        when a newer incarnation of the job has started: this process is
        stale (e.g. its node was partitioned and its pod replaced) and
        nothing it saves will be resumed, so by default it stops."""
        self._checkpoints.refuse_if_read_only()
        if self._state.sharded:  # every rank writes its part: a collective
            name = self._checkpoints.save()
        elif self.config.rank != 0:
            return None
        else:
            name = self._checkpoints.save()
        if self.config.rank == 0:
            self._checkpoints.prune()
        return name

    def periodic(self, steps=0, seconds=0.0):
        """Checkpoint in the background every `steps` optimizer steps and/or
        every `seconds` of training (0: off), at the end of a step() block.
        Defaults: TRAINGUARD_CHECKPOINT_EVERY_STEPS and
        TRAINGUARD_CHECKPOINT_EVERY (a duration such as 60s)."""
        self._periodic.set(steps, seconds)
        return self

    @property
    def periodic_stats(self):
        """{'saves', 'failures', 'waited', 'stall_seconds'} of the background saves:
        waited counts saves that fell due while the previous one still wrote;
        stall_seconds is the training time they took (copies and such waits)."""
        return self._periodic.stats

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
            self._stopping.watch_own_ack()
            if self._stopping.termination is not None:
                self._terminate()
            why = peer.classify(e)
            if why is not None and self._recovery.recover(e, why):
                return  # the group is whole again: steps() yields this step again
            if why is not None:
                code = self._recovery.exit_code
                self._peer.lost(e, why, True, traceback=True, code=code)
                raise SystemExit(code) from e
            raise
        self._state.completed()
        self._checkpoints.writer.raise_if_fenced()
        if self._state.sharded:
            self._sharded_boundary()
        elif self._requests.pending:
            self._answer_requests()
        elif self._periodic.due():
            self._periodic.save()
            self._now.taken(self._state.step)
        elif self._now_due():
            log.info("trainguard: checkpoint now: saving step %d in the background", self._state.step)
            self._periodic.save()
            self._now.taken(self._state.step, extra=True)
        if self._stopping.termination is not None:
            self._terminate()
        elif self._stopping.sigterm_from_agent:
            self._stopping.end_on_sigterm(self._peer.last_words)

    def steps(self, total):
        """The steps to train, global_step up to total: `for step in
        migrator.steps(total): with migrator.step(): ...`. After an
        in-process recovery (docs/checkpoint-protocol.md) the step that was
        abandoned comes again; only a loop driven so recovers in process."""
        return self._recovery.steps(total)

    def exit(self, info=None):
        """The default termination hook: stop the listener, finish a save in
        flight, leave the torch.distributed process group, flush logs and
        raise SystemExit(143) from the step() boundary, so the user's
        `finally` blocks and atexit handlers run. A watchdog ends the
        process with 143 if it has not ended TRAINGUARD_EXIT_GRACE (10 s)
        later."""
        info = info or {}
        log.info("trainguard: training stopped after the termination checkpoint at step %d (agent: %s); exiting %d",
                 self._state.step, info.get("outcome") or info.get("why", "?"), proto.EXIT_CODE)
        if self.config.exit_grace > 0:
            exiting.start_watchdog(self.config.exit_grace)
        self.close()
        exiting.shutdown_distributed(storage.initialized_dist())
        exiting.flush_output()
        raise SystemExit(proto.EXIT_CODE)

    # ------------------------------------------------------------ internals

    def _terminate(self):
        self._stopping.terminate(self._answer_with, self.termination_hook or self.exit)

    def _answer_requests(self):
        """Global rank 0 at a step boundary: one checkpoint answers every
        pending request; this pod's own then ends training."""
        pending = self._requests.take()
        log.info("trainguard: checkpoint requested (%s), saving at step %d",
                 ", ".join("generation %d" % g for g, _ in pending.values()), self._state.step)
        own = pending.get(self._dirs.own_key)
        if own and self.config.after_checkpoint == "exit":
            self._stopping.sigterm.install()  # this pod stops: SIGTERM must not cut the save or the exit short
        try:
            name, error = self._checkpoints.save(), ""
        except Exception as e:  # disk full, permission: the agent must hear about it
            name, error = None, "%s: %s" % (type(e).__name__, e)
            log.error("trainguard: checkpoint failed: %s", error)
        self._requests.ack(pending, self._state.step, name, self._checkpoints.last_bytes, error)
        if not error:  # after the ack: deleting an old checkpoint is not the stopping pod's wait
            self._checkpoints.prune()
        if own and not error:
            self._stopping.note(own[0], own[1], name)
        elif own:
            self._stopping.sigterm.restore()  # no checkpoint: training goes on, so does SIGTERM's default

    def _sharded_boundary(self):
        """Sharded state: every rank saves at the same step or none does.
        Global rank 0 decides (a request pending, a periodic save or a
        checkpoint now due) and tells the others: one small broadcast per step."""
        decision, now = shards.NONE, False
        if self.config.rank == 0 and not self._checkpoints.read_only:
            if self._requests.pending:
                decision = shards.REQUEST
            elif self._periodic.due():
                decision = shards.PERIODIC
            elif self._now_due():  # taken as a periodic save is: every rank, this step
                decision, now = shards.PERIODIC, True
        decision = self._coordinator.agree(storage.initialized_dist(), decision)
        if decision == shards.REQUEST and self.config.rank == 0:
            self._answer_requests()
        elif decision == shards.PERIODIC:
            if now:
                log.info("trainguard: checkpoint now: saving step %d on every rank", self._state.step)
            self._periodic.save_now()
            if now:  # a failed save leaves the request waiting, for the next interval
                committed = self._checkpoints.committed_step
                self._now.taken(committed if committed is not None else -1, extra=True)
        elif decision == shards.REQUEST:
            try:
                self._checkpoints.save()
            except Exception as e:  # rank 0 acknowledges the failure; this rank trains on
                log.error("trainguard: rank %d: checkpoint failed: %s: %s", self.config.rank, type(e).__name__, e)

    def _now_due(self):
        return self._now.due(self._state.step, self._checkpoints.committed_step)

    def _answer_with(self, name):
        """Another pod's request while this one stops: this checkpoint answers it."""
        if self._requests.pending and name:
            self._requests.ack(self._requests.take(), self._state.step, name, self._checkpoints.last_bytes, "")

    def _listen(self):
        cfg = self.config
        waker = self._dirs.waker
        next_beat = next_peers = 0.0
        while not self._stop.is_set():
            if not waker.wait(cfg.poll_interval):
                self._stop.wait(0 if waker.active else cfg.poll_interval)
            if self._stop.is_set():
                return
            try:
                if time.time() >= next_beat:
                    self._requests.heartbeat(self._state.phase, self._state.step, self._peer.started)
                    next_beat = time.time() + cfg.heartbeat_interval
                if cfg.rank == 0:
                    dirs = self._dirs.all()
                    self._requests.scan(dirs)
                    self._now.scan(self._state.step, dirs)
                self._stopping.watch_own_ack()
                if cfg.world_size > 1 and cfg.local_rank == 0 and time.time() >= next_peers:
                    # One rank per pod, every PEER_WATCH_INTERVAL: the first
                    # survivor to exit closes its own connections, which
                    # fails the collectives of the others.
                    self._peer.watch(self._dirs.peer_heartbeats(), self._checkpoints.newest_generation())
                    next_peers = time.time() + PEER_WATCH_INTERVAL
            except Exception as e:  # the listener must outlive a flaky volume
                log.warning("trainguard: listener: %s: %s", type(e).__name__, e)
