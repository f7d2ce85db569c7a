"""Compare state dumps written by train.py --dump-state/--dump-final.

    compare_state.py A B [C ...]        exit 0 when all are bit-identical
    compare_state.py --checkpoint DIR [--name CKPT] A
                                         also compare A with DIR's latest checkpoint (or CKPT)

Tensors are compared with torch.equal (exact), so any drift fails.
"""

import json
import os
import sys

import torch


def equal(a, b, path="state"):
    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)):
            return "%s: tensors differ" % path
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return "%s: keys differ: %s vs %s" % (path, sorted(a, key=str), sorted(b, key=str))
        for k in a:
            err = equal(a[k], b[k], "%s.%s" % (path, k))
            if err:
                return err
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return "%s: lengths differ" % path
        for i, (x, y) in enumerate(zip(a, b)):
            err = equal(x, y, "%s[%d]" % (path, i))
            if err:
                return err
        return None
    return None if a == b else "%s: %r != %r" % (path, a, b)


def from_checkpoint(directory, name=None):
    """A checkpoint (the pointer's, unless name is given), read the way the
    SDK reads it (safe loader)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
    from trainguard import _storage as storage
    ptr = json.load(open(os.path.join(directory, "trainguard-latest.json")))
    name = name or ptr["file"]
    # The SDK loads only a checkpoint of its own job; this tool compares the
    # job's checkpoint as recorded, so it asks for the job the state names.
    with open(os.path.join(directory, name, storage.STATE_FILE)) as f:
        job = json.load(f).get("job", "")
    ck = storage.load_checkpoint(directory, name, job)
    s = ck["states"]
    return {"model": s["model"], "optimizer": s["optimizer"], "metrics": s["metrics"], "step": ck["step"]}


def main(argv):
    states = []
    if argv and argv[0] == "--checkpoint":
        directory, argv = argv[1], argv[2:]
        name = None
        if argv and argv[0] == "--name":
            name, argv = argv[1], argv[2:]
        states.append(("checkpoint", from_checkpoint(directory, name)))
    states += [(p, torch.load(p, map_location="cpu")) for p in argv]
    if len(states) < 2:
        print(__doc__)
        return 2
    name0, first = states[0]
    for name, other in states[1:]:
        err = equal(first, other)
        if err:
            print("DIFFERENT %s vs %s: %s" % (name0, name, err))
            return 1
    print("IDENTICAL (%d states, step %s)" % (len(states), first.get("step")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
