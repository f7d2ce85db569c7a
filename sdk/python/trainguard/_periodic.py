"""Periodic checkpoints written in the background.

A periodic checkpoint bounds what a crash loses (the steps since the last
one). It must cost little: at a safe point the trainer only copies its state
(tensors to fresh CPU tensors, containers rebuilt), which is what a save
cannot avoid; encoding, writing, fsyncing and the commit run in a thread
while training goes on. One background save at a time: when the next one is
due while the last is still writing, training waits for that one to finish
(checkpoints more frequent than the disk can take cost training time, and
show in the stats) rather than skipping a due checkpoint.
"""

import copy
import logging
import threading
import time
from collections import OrderedDict

from . import _fence as fence

log = logging.getLogger("trainguard")


class Schedule:
    """When the next periodic checkpoint is due: at every multiple of `steps`
    optimizer steps and/or every `seconds` of training, whichever comes first
    (0: off)."""

    def __init__(self, steps=0, seconds=0.0, clock=time.monotonic):
        self.steps, self.seconds, self._clock = max(0, int(steps)), max(0.0, float(seconds)), clock
        self._step, self._time = None, clock()

    @property
    def enabled(self):
        return bool(self.steps or self.seconds)

    def begin(self, step):
        """Count from step (where training started or resumed), once."""
        if self._step is None:
            self._step, self._time = step, self._clock()

    def due(self, step):
        if not self.enabled or self._step is None:
            return False
        # Steps: at every multiple of `steps` (10, 20, 30... also after a
        # resume at 37), as a loop's `(step + 1) % steps == 0` would.
        return bool((self.steps and step // self.steps > self._step // self.steps)
                    or (self.seconds and self._clock() - self._time >= self.seconds))

    def saved(self, step):
        self._step, self._time = step, self._clock()


def snapshot(value, torch):
    """A copy of a state that training can no longer change: every tensor
    copied to a new CPU tensor, every container rebuilt, other values deep
    copied (numbers and strings are immutable and shared)."""
    if torch is not None and torch.is_tensor(value):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return value
    if isinstance(value, dict):
        out = OrderedDict() if isinstance(value, OrderedDict) else {}
        for k, v in value.items():
            out[k] = snapshot(v, torch)
        if hasattr(value, "_metadata"):  # a module's state_dict carries its version info here
            out._metadata = copy.deepcopy(value._metadata)
        return out
    if isinstance(value, list):
        return [snapshot(v, torch) for v in value]
    if isinstance(value, tuple):
        return tuple(snapshot(v, torch) for v in value)
    return copy.deepcopy(value)


class Writer:
    """Runs one background save at a time and keeps its outcome: a refusal
    by the fence is raised at the trainer's next step; any other failure is
    logged and counted, and the next periodic save tries again."""

    def __init__(self):
        self._thread = None
        self._fenced = None
        self.saves = self.failures = self.waited = 0
        self.stall_seconds = 0.0  # training time spent copying state or waiting for the last save, in total

    def busy(self):
        return self._thread is not None and self._thread.is_alive()

    def start(self, write):
        # Not a daemon: a trainer that returns from main() while a save is in
        # flight exits once the save is committed, not halfway through it.
        self._thread = threading.Thread(target=self._run, args=(write,), name="trainguard-checkpoint")
        self._thread.start()

    def _run(self, write):
        try:
            write()
            self.saves += 1
        except fence.Fenced as e:
            self._fenced = e
        except Exception as e:  # disk full, permission: training goes on, the next save retries
            self.failures += 1
            log.error("trainguard: periodic checkpoint failed: %s: %s", type(e).__name__, e)

    def wait(self):
        """Let a save in flight finish: two writers never overlap."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def raise_if_fenced(self):
        if self._fenced is not None:
            e, self._fenced = self._fenced, None
            raise e


class Periodic:
    """Periodic checkpoints of a trainer: when one is due and its
    background save. checkpoints: the _checkpoints.Checkpoints written to
    (its writer is the one background save in flight); state: the
    _state.State copied."""

    def __init__(self, settings, state, checkpoints):
        self._settings, self._state, self._checkpoints = settings, state, checkpoints
        self._schedule = None  # from the environment unless set() chose one

    def set(self, steps=0, seconds=0.0):
        self._schedule = Schedule(steps, seconds)

    def due(self):
        """Whether global rank 0 saves at this step boundary."""
        cfg = self._settings.config
        if self._schedule is None:
            self._schedule = Schedule(cfg.every_steps, cfg.every_seconds)
        self._schedule.begin(self._state.step - 1)  # the step this process started (or resumed) at
        return cfg.rank == 0 and not self._checkpoints.read_only and self._schedule.due(self._state.step)

    def save(self):
        """Copy the state now (the only part training waits for, unless the
        previous background save still writes: then it waits for that one
        first, so every due checkpoint is taken), write it in a thread."""
        started, writer, checkpoints = time.monotonic(), self._checkpoints.writer, self._checkpoints
        if writer.busy():
            writer.waited += 1
            writer.wait()
        writer.raise_if_fenced()
        checkpoints.claim()
        cfg = self._settings.config
        payload = self._state.payload(cfg.world_size, serializer=cfg.serializer)
        writer.stall_seconds += time.monotonic() - started
        self._schedule.saved(self._state.step)

        def write():
            checkpoints.write(payload)
            checkpoints.prune()

        writer.start(write)

    def save_now(self):
        """A due periodic save of sharded state, on every rank at once
        (Checkpoints.save: a collective), in the training thread: its commit
        needs every rank's part, and a collective of a background thread
        could interleave with training's. A failure is logged and counted,
        as a background save's; a refusal by the fence raises."""
        started, writer = time.monotonic(), self._checkpoints.writer
        try:
            self._checkpoints.save()
            writer.saves += 1
            if self._settings.config.rank == 0:
                self._checkpoints.prune()
        except fence.Fenced:
            raise
        except Exception as e:
            writer.failures += 1
            log.error("trainguard: periodic checkpoint failed: %s: %s", type(e).__name__, e)
        writer.stall_seconds += time.monotonic() - started
        if self._schedule is not None:
            self._schedule.saved(self._state.step)

    @property
    def stats(self):
        w = self._checkpoints.writer
        return {"saves": w.saves, "failures": w.failures, "waited": w.waited, "stall_seconds": w.stall_seconds}
