"""What the trainer holds and where it is: the registered objects, the
optimizer steps completed, and whether the state is at a step boundary.

Capture and restore are here, apart from where a state goes (a checkpoint
on the volume, _checkpoints.py) and from why it is taken (a request, a
periodic save, a peer's death), so any of them can hand a state on.
"""

import logging
import time

from . import _peer as peer
from . import _periodic as periodic
from . import _shards as shards
from . import _storage as storage

log = logging.getLogger("trainguard")


class State:
    """The registered objects and the training position. `phase` is what
    the heartbeat reports: "training", "saving" or "holding"."""

    def __init__(self):
        self.objects = {}
        self.sharded = []  # names of the objects every rank saves its part of (_shards.py)
        self.step = 0  # step() blocks completed, or the step a load restored
        self.phase = "training"
        self.replicated = None  # declared by Migrator.replicated(); None: a registered DDP tells
        # The optimizer steps counted, and their count when the last step()
        # block completed, tell a clean step boundary from a torn one.
        self.optimizer_steps = peer.OptimizerSteps()
        self._steps_at_boundary = 0

    def register(self, name, obj):
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")) \
                and not isinstance(obj, (dict, list)):
            raise TypeError("trainguard: cannot checkpoint %r (%s): need state_dict/load_state_dict, "
                            "a dict or a list" % (name, type(obj).__name__))
        is_sharded = shards.kind(name, obj)  # raises for sharded state it cannot save
        self.objects[name] = obj
        self.sharded = [n for n in self.sharded if n != name] + ([name] if is_sharded else [])
        self.optimizer_steps.watch(obj)

    def completed(self):
        """A step() block completed: the state is at a step boundary."""
        self.step += 1
        self._steps_at_boundary = self.optimizer_steps.count

    def torn(self):
        """The optimizer stepped since the last boundary: the state is between two steps."""
        return self.optimizer_steps.count != self._steps_at_boundary

    def capture(self, serializer=None):
        """{name: state} of every registered object. With a serializer, a
        copy training can no longer change (tensors copied to the CPU), for
        a save that runs while training goes on."""
        states = {k: _capture(o) for k, o in self.objects.items() if k not in self.sharded}
        if serializer is not None:
            states = periodic.snapshot(states, storage.use_torch(serializer))
        return states

    def payload(self, world_size, serializer=None):
        """What storage.write_checkpoint writes: this step's captured state
        (the sharded objects' parts apart, in part())."""
        return {"format": storage.FORMAT_VERSION, "step": self.step, "saved_at": time.time(),
                "world_size": world_size, "states": self.capture(serializer)}

    def part(self):
        """{name: this rank's part} of the sharded objects."""
        return {k: shards.capture(self.objects[k]) for k in self.sharded}

    def restore(self, states, step, source, parts=()):
        """Load states into the registered objects (dicts and lists in
        place) and take step as the position; parts names the states that
        are this rank's part of a sharded object; source names the states
        in the warnings about an object one side lacks."""
        for key, obj in self.objects.items():
            if key not in states:
                log.warning("trainguard: checkpoint %s has no %r; it keeps its initial value", source, key)
                continue
            if key in parts:
                shards.restore(key, obj, states[key])
            else:
                _restore(obj, states[key])
        for key in states:
            if key not in self.objects:
                log.warning("trainguard: checkpoint %s has %r, which nobody registered", source, key)
        self.step = step
        self._steps_at_boundary = self.optimizer_steps.count


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
