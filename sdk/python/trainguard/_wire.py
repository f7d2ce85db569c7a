"""What the SDK's ranks send each other, without pickle.

torch.distributed's *_object collectives pickle what one rank sends and
unpickle it on the others, so whoever takes part in a group runs code in
every rank of it: a group the survivors re-form (_reform.py) meets through
the job's TCPStore at MASTER_PORT, which any pod that reaches the port may
write, without a password. The SDK's own messages go as JSON in uint8
tensors instead (the same two collectives: sizes, then the padded bytes),
and a state as the checkpoint format (_reform.py). Every rank checks the
same bytes the same way, so a bad message makes every rank raise at the
same point: none waits in a collective the others left.

Imports torch only when called (with torch.distributed initialised).
"""

import json

MAX_JSON = 16 << 20  # a signature of 100,000 tensors is about 6 MiB


class PeerBytes(ValueError):
    """A rank sent what no trainguard rank sends."""


def device(dist):
    """Where the group's collectives take tensors (NCCL moves CUDA tensors only)."""
    import torch
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _tensor(torch, data, n, dev):
    """data in a uint8 tensor of n bytes on dev (zeros after it)."""
    t = torch.zeros(n, dtype=torch.uint8)
    if data:
        t[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return t.to(dev)


def _bytes(t, n):
    return t[:n].cpu().numpy().tobytes()


def _size(n, limit, who, what):
    if not 0 < n <= limit:
        raise PeerBytes("%s announced %d bytes of %s, not 1 to %d; nothing of it is read" % (who, n, what, limit))
    return n


def loads(data, who, what):
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise PeerBytes("%s sent %s that is not JSON (%s: %s); nothing of it is read"
                        % (who, what, type(e).__name__, str(e)[:80])) from None


def _dumps(value):
    return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()


def gather_json(dist, value, what):
    """Every rank's value (JSON-able), in rank order, as all_gather_object
    gives it but decoded as JSON; raises PeerBytes naming the rank that sent
    something else. what names the message in the error."""
    import torch
    dev, world = device(dist), dist.get_world_size()
    data = _dumps(value)
    sizes = [torch.zeros(1, dtype=torch.long, device=dev) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.long, device=dev))
    sizes = [_size(int(s.item()), MAX_JSON, "rank %d" % r, what) for r, s in enumerate(sizes)]
    most = max(sizes)
    out = [torch.zeros(most, dtype=torch.uint8, device=dev) for _ in range(world)]
    dist.all_gather(out, _tensor(torch, data, most, dev))
    return [loads(_bytes(t, n), "rank %d" % r, what) for r, (t, n) in enumerate(zip(out, sizes))]


def broadcast_bytes(dist, data, src, limit, what):
    """src's data (bytes; ignored elsewhere) on every rank, at most limit
    bytes: a larger announcement raises PeerBytes on every rank before any
    of it is allocated."""
    import torch
    dev = device(dist)
    mine = dist.get_rank() == src
    n = torch.tensor([len(data) if mine else 0], dtype=torch.long, device=dev)
    dist.broadcast(n, src)
    n = _size(int(n.item()), limit, "rank %d" % src, what)
    buf = _tensor(torch, data if mine else b"", n, dev)
    dist.broadcast(buf, src)
    return data if mine else _bytes(buf, n)


def broadcast_json(dist, value, src, what):
    """src's value (JSON-able; ignored elsewhere) on every rank, decoded as JSON."""
    mine = dist.get_rank() == src
    data = broadcast_bytes(dist, _dumps(value) if mine else b"", src, MAX_JSON, what)
    return loads(data, "rank %d" % src, what)
