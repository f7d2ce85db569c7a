"""Sharded state: every rank holds a part of it, so every rank saves its part.

A registered torch.distributed.optim.ZeroRedundancyOptimizer keeps each
parameter's optimizer state on one rank only; its state_dict() is the whole
state once consolidated on one rank (a collective), which rank 0 alone
cannot call: it died with torch's "Optimizer state has not been
consolidated on this rank" and the other rank with "Connection closed by
peer". Here each rank saves its own part (the local optimizer's state) into
the same temp directory; global rank 0 commits the directory only once
every part is written (docs/checkpoint-protocol.md, "Sharded state").

A save of sharded state is a collective: every rank takes it at the same
step() boundary. Global rank 0 decides whether one is due (a request, a
periodic save) and tells the others with one small broadcast per step.

FSDP, ShardedTensor and DTensor are refused at register(): trainguard
cannot save them (torch 1.13, the one tested, cannot even import its
sharded tensors on Python 3.11), and a save would otherwise wait for ranks
that never join.
"""

from . import _peer as peer
from . import _wire as wire

SUPPORTED = "torch.distributed.optim.ZeroRedundancyOptimizer (overlap_with_ddp=False)"

# What rank 0 tells the others at a step boundary.
NONE, PERIODIC, REQUEST = 0, 1, 2


def kind(name, obj):
    """True when obj is sharded state trainguard saves part by part, False
    when it is not sharded; raises TypeError naming what is supported for
    sharded state it cannot save."""
    if not peer.sharded({name: obj}):
        return False
    if _is_zero(obj) and not getattr(obj, "_overlap_with_ddp", False):
        return True
    what = type(obj).__name__
    if _is_zero(obj):
        what += "(overlap_with_ddp=True), whose state exists only once DDP rebuilt its buckets,"
    else:
        what += " holds sharded state (FSDP, ShardedTensor or DTensor) and"
    raise TypeError("trainguard: cannot checkpoint %r: %s cannot be saved by trainguard. Sharded state is "
                    "supported for %s; a replicated model (DistributedDataParallel) with it is fine. Save "
                    "other sharded state with its own API and do not register it"
                    % (name, what, SUPPORTED))


def _is_zero(obj):
    return "ZeroRedundancyOptimizer" in peer._type_names(obj)


def capture(obj):
    """This rank's part: the local optimizer's state (this rank's parameters only)."""
    return obj.optim.state_dict()


def restore(name, obj, part):
    if not _is_zero(obj):
        raise RuntimeError("trainguard: the checkpoint holds rank parts of %r (a ZeroRedundancyOptimizer's), "
                           "but %r is a %s now: register the same sharded optimizer to resume from it"
                           % (name, name, type(obj).__name__))
    obj.optim.load_state_dict(part)
    # The hyperparameters (a scheduler's lr) live in both param_groups; step() copies
    # the exposed ones to the local optimizer, so they must hold the restored values.
    obj._sync_param_groups(obj.optim.param_groups, obj.param_groups)


class Coordinator:
    """The one broadcast per step() boundary that makes every rank take a
    sharded save at the same step: rank 0's decision, as one integer."""

    def __init__(self):
        self._tensor = None

    def agree(self, dist, decision):
        if dist is None or dist.get_world_size() < 2:
            return decision
        torch = _torch()
        if self._tensor is None:
            self._tensor = torch.zeros(1, dtype=torch.int64, device=wire.device(dist))
        self._tensor.fill_(decision)
        dist.broadcast(self._tensor, 0)
        return int(self._tensor.item())


def _torch():
    import torch
    return torch
