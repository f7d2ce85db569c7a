"""Fencing: a stale incarnation of a job's trainer can never commit over a
newer one's checkpoints (docs/checkpoint-protocol.md, "Fencing").

Every incarnation of a job's global rank 0 claims a generation when it
starts: the next number, taken by creating the directory
trainguard-gen-NNNNNNNN in the job's checkpoint directory. mkdir is
exclusive on every filesystem a claim may be on (local, NFS, EFS, Lustre),
so two incarnations can never hold the same number, and nothing has to be
locked. A process whose node was partitioned (a "zombie": its pod was
force-deleted and replaced while its containers kept running) holds the
older number; before each commit it looks for a newer one and refuses.
"""

import os
import re
import time

from . import _protocol as proto

GEN_PREFIX = "trainguard-gen-"
OWNER_FILE = "owner.json"
_GEN = re.compile(r"^" + re.escape(GEN_PREFIX) + r"(\d{8})$")
_MAX_CLAIM_TRIES = 1000
# Markers this many generations below the newest are removed when a new one
# is claimed: only the newest matters to the fence; the rest is history.
KEEP_MARKERS = 16


class Fenced(RuntimeError):
    """This process's generation is older than one that has started since:
    it is a stale incarnation, and nothing it saves may become the job's
    latest checkpoint."""

    def __init__(self, directory, generation, newer):
        owner = read_owner(directory, newer)
        who = " (pod %s)" % owner["pod"] if isinstance(owner.get("pod"), str) else ""
        super().__init__("generation %d%s started in %s after this process's generation %d: this process is a stale "
                         "incarnation of the job (its pod was replaced, e.g. after its node was partitioned); its "
                         "checkpoints are refused and never resumed" % (newer, who, directory, generation))
        self.generation, self.newer = generation, newer


def marker(generation):
    return "%s%08d" % (GEN_PREFIX, generation)


def generations(directory):
    """The generations claimed in directory, ascending. Only real
    directories count: a file or symlink with a marker's name is ignored."""
    out = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return out
    for e in entries:
        m = _GEN.match(e.name)
        if m and e.is_dir(follow_symlinks=False):
            out.append(int(m.group(1)))
    return sorted(out)


def newest(directory):
    gens = generations(directory)
    return gens[-1] if gens else 0


def claim(directory, pod="", uid=""):
    """Take the next generation: mkdir of its marker is the atomic step.
    Losing a race to another incarnation just moves on to the next number."""
    for _ in range(_MAX_CLAIM_TRIES):
        gen = newest(directory) + 1
        path = os.path.join(directory, marker(gen))
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            continue
        # Who holds it, for people and for the refusal message; the fence
        # itself only needs the directory.
        proto.write_json_atomic(os.path.join(path, OWNER_FILE),
                                {"generation": gen, "pod": pod, "pod_uid": uid, "pid": os.getpid(),
                                 "claimed_at": time.time()})
        proto.fsync_dir(directory)
        _drop_old_markers(directory, gen)
        return gen
    raise RuntimeError("trainguard: could not claim a generation in %s after %d tries" % (directory, _MAX_CLAIM_TRIES))


def check(directory, generation):
    """Raise Fenced when a generation newer than ours has been claimed."""
    latest = newest(directory)
    if latest > generation:
        raise Fenced(directory, generation, latest)


def read_owner(directory, generation):
    owner = proto.read_json(os.path.join(directory, marker(generation), OWNER_FILE))
    return owner if owner is not None else {}


def _drop_old_markers(directory, current):
    for gen in generations(directory):
        if gen < current - KEEP_MARKERS:
            path = os.path.join(directory, marker(gen))
            try:
                os.unlink(os.path.join(path, OWNER_FILE))
            except OSError:
                pass
            try:
                os.rmdir(path)
            except OSError:
                pass


def generation_of(commit):
    """A commit's generation from its commit.json; 0 for commits written
    before fencing existed (they rank below every fenced commit)."""
    gen = commit.get("generation", 0) if isinstance(commit, dict) else 0
    return gen if isinstance(gen, int) and not isinstance(gen, bool) and gen >= 0 else 0
