"""This process's checkpoints: the job's directory opened once, the fence
generation this incarnation claims, the saves it writes (one writer at a
time, background saves included) and the checkpoint it resumes from.

The format on the volume is _storage.py's; the fence is _fence.py's.
"""

import logging
import time

from . import _fence as fence
from . import _periodic as periodic
from . import _protocol as proto
from . import _reform as reform
from . import _storage as storage
from . import _wire as wire

log = logging.getLogger("trainguard")

_UNRESOLVED = object()


class Checkpoints:
    """settings: a proto.Settings; state: the _state.State saved and restored."""

    def __init__(self, settings, state):
        self._settings, self._state = settings, state
        self.read_only = False  # a reader: writes nothing, claims nothing
        self._root = None
        self.generation = 0  # this incarnation's fence generation (global rank 0), claimed once
        self.line = ""  # the line of generations it was claimed in ("": no reset yet)
        self.refused_commits = 0  # saves refused because a newer incarnation started
        self.last_bytes = 0  # size of the last checkpoint this process wrote
        self.committed_step = None  # the step of the last checkpoint written or loaded
        self.committed_at = None  # saved_at of the last checkpoint this process wrote
        self.save_seconds = None  # how long that write took
        self.writer = periodic.Writer()  # the background save in flight, if any
        self._resolved = _UNRESOLVED  # (name, payload) or None, decided once
        # A state from a peer's memory, asked before the volume (dist):
        # _reform.Recovery.received.
        self.from_peer = None

    @property
    def _cfg(self):
        return self._settings.config

    def root(self):
        """The checkpoint directory, opened once (O_NOFOLLOW|O_DIRECTORY);
        None while it does not exist."""
        if self._root is None:
            try:
                self._root = proto.Dir.open(self._cfg.checkpoint_dir)
            except FileNotFoundError:
                return None
        return self._root

    def newest_generation(self):
        """The newest fence generation claimed in the checkpoint directory,
        or None while there is none to read."""
        root = self.root()
        if root is None:
            return None
        try:
            return fence.newest(root)
        except OSError:
            return None

    def close(self):
        if self._root is not None:
            self._root.close()
            self._root = None

    def refuse_if_read_only(self):
        if self.read_only:
            raise RuntimeError("trainguard: this Migrator is read-only (read_only()): it never saves, so it never "
                               "fences the job's trainer; use a Migrator without read_only to write checkpoints")

    def claim(self):
        """Global rank 0 claims this incarnation's generation once, when it
        starts listening or at its first save, never for a load: an
        evaluation job or a debug pod that loads must not fence the live
        trainer (docs/checkpoint-protocol.md, "Fencing")."""
        self.refuse_if_read_only()
        cfg = self._cfg
        if self.generation or cfg.rank != 0 or self.root() is None:
            return
        self.generation, self.line = fence.claim_in_line(self._root, pod=cfg.pod, uid=cfg.pod_uid)
        log.info("trainguard: incarnation generation %d%s in %s", self.generation,
                 " (line %s)" % self.line if self.line else "", cfg.checkpoint_dir)

    # ------------------------------------------------------------ saving

    def save(self, unless_step=None):
        """Save the state now: a background save in flight finishes first
        (one writer at a time). Returns the checkpoint's name, or None when
        unless_step is the step last committed. Raises fence.Fenced."""
        self.writer.wait()
        if unless_step is not None and self.committed_step == unless_step:
            return None
        self.writer.raise_if_fenced()
        phase, self._state.phase = self._state.phase, "saving"
        try:
            self.claim()
            if self._state.sharded:
                return self.write_sharded()
            return self.write(self._state.payload(self._cfg.world_size))
        finally:
            self._state.phase = phase

    def write_sharded(self):
        """Every rank at the same step: each writes its part, global rank 0
        commits once all are written (storage.write_sharded_checkpoint)."""
        dist = storage.initialized_dist()
        payload = self._state.payload(dist.get_world_size() if dist is not None else self._cfg.world_size)
        started = time.monotonic()
        try:
            name, size = storage.write_sharded_checkpoint(self._cfg, payload, self._state.part(), self.generation,
                                                          self.root(), self.line, dist)
        except fence.Fenced as e:
            self.refused_commits += 1
            log.error("trainguard: commit %d refused: %s", self.refused_commits, e)
            raise
        self.last_bytes = size
        self.committed_step = payload["step"]
        self.committed_at, self.save_seconds = payload["saved_at"], time.monotonic() - started
        log.info("trainguard: saved %s at step %d (%d bytes, every rank's part)", name, payload["step"], size)
        return name

    def write(self, payload):
        """Commit payload (State.payload) as this incarnation's next checkpoint."""
        started = time.monotonic()
        try:
            name, size = storage.write_checkpoint(self._cfg, payload, self.generation, self.root(), line=self.line)
        except fence.Fenced as e:
            self.refused_commits += 1
            log.error("trainguard: commit %d refused: %s", self.refused_commits, e)
            raise
        self.last_bytes = size
        self.committed_step = payload["step"]
        self.committed_at, self.save_seconds = payload["saved_at"], time.monotonic() - started
        log.info("trainguard: saved %s at step %d (%d bytes)", name, payload["step"], size)
        return name

    def prune(self):
        storage.prune(self.root() or self._cfg.checkpoint_dir, keep=self._cfg.keep)

    def committed(self):
        """(step, saved_at) of the job's last committed checkpoint: this
        process's own, else the pointer global rank 0 wrote; (None, None)."""
        if self.committed_at is not None:
            return self.committed_step, self.committed_at
        ptr = storage.read_pointer(self._cfg.checkpoint_dir)
        if ptr is not None and isinstance(ptr.get("step"), int) and isinstance(ptr.get("saved_at"), (int, float)):
            return ptr["step"], ptr["saved_at"]
        return self.committed_step, None

    # ------------------------------------------------------------ loading

    def resolve(self):
        """Choose the checkpoint once: (name, payload) or None. With
        torch.distributed initialised, rank 0 chooses and broadcasts the
        name, so every rank loads the same file even if rank 0 had to skip
        a corrupt one. Loading takes no generation."""
        if self._resolved is not _UNRESOLVED:
            return self._resolved
        dist = storage.initialized_dist()
        peer = self.from_peer(dist) if dist is not None and self.from_peer is not None else None
        if peer == reform.ALONE:  # the peers leave: the checkpoint, chosen alone
            chosen = self._pick()
        elif peer is not None:
            chosen = peer
        elif dist is not None and dist.get_world_size() > 1:
            chosen, refused = None, None
            if dist.get_rank() == 0:
                try:
                    chosen = self._pick()
                except storage.WorldSizeMismatch as e:
                    refused = e
            # A refusal reaches every rank: the others would wait for a name forever.
            box = wire.broadcast_json(dist, [chosen[0] if chosen else None, str(refused) if refused else ""], 0,
                                      "the checkpoint it chose")
            if not (isinstance(box, list) and len(box) == 2 and isinstance(box[0], (str, type(None)))
                    and isinstance(box[1], str)):
                raise wire.PeerBytes("rank 0 chose no checkpoint name: %r" % (box,))
            if refused is not None:
                raise refused
            if box[1]:
                raise storage.WorldSizeMismatch.relayed(box[1])
            if dist.get_rank() != 0 and box[0] is not None:
                chosen = self._load_named(box[0])
        else:
            chosen = self._pick()
        self._resolved = chosen
        return chosen

    def load(self):
        """(name, payload) of the chosen checkpoint, read again if it was
        loaded before, or None. The payload is not kept: it can be large."""
        chosen = self.resolve()
        if chosen is None:
            log.warning("trainguard: no usable checkpoint in %s; starting fresh", self._cfg.checkpoint_dir)
            return None
        if chosen[1] is None:
            chosen = self._load_named(chosen[0])
            if chosen is None:
                return None
        if chosen[0].startswith(reform.PEER_NAME):  # a peer's state: in no checkpoint, and not on the volume to read again
            return chosen
        self._resolved = (chosen[0], None)
        self.committed_step = chosen[1]["step"]
        return chosen

    def _pick(self):
        directory = self.root()
        if directory is None:
            return None
        for name in storage.candidates(directory):
            chosen = self._load_named(name)
            if chosen is not None:
                return chosen
        return None

    def _load_named(self, name):
        try:
            dist = storage.initialized_dist()
            rank, world = (dist.get_rank(), dist.get_world_size()) if dist is not None else (self._cfg.rank, self._cfg.world_size)
            return name, storage.load_checkpoint(self.root() or self._cfg.checkpoint_dir, name, self._cfg.job,
                                                 rank, world)
        except storage.CorruptCheckpoint as e:
            log.warning("trainguard: skipping unusable checkpoint (falling back to the previous one): %s", e)
            return None
