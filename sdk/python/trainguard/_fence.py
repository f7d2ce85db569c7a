"""Fencing: a stale incarnation of a job's trainer can never commit over a
newer one's checkpoints (docs/checkpoint-protocol.md, "Fencing").

Every incarnation of a job's global rank 0 claims a generation when it
starts listening (or at its first save if it never listens; never when it
only loads, so an evaluation job or a debug pod that reads the directory
does not fence the live trainer): the next number, taken by creating the
directory trainguard-gen-N in the job's checkpoint directory. mkdir is
exclusive on every filesystem a claim may be on (local, NFS, EFS, Lustre),
so two incarnations can never hold the same number, and nothing has to be
locked. A process whose node was partitioned (a "zombie": its pod was
force-deleted and replaced while its containers kept running) holds the
older number; before each commit it looks for a newer one and refuses.

Everything here is on a volume other processes may write: any entry named
like a marker (a file, a symlink, any number of digits) is taken, numbers
beyond MAX_GENERATION are refused, and a commit's recorded generation is
bounded by the markers that exist (_storage.ranked).
"""

import errno
import os
import re
import time

from . import _protocol as proto

GEN_PREFIX = "trainguard-gen-"
OWNER_FILE = "owner.json"
MAX_GENERATION = proto.MAX_GENERATION
_GEN = re.compile(r"^" + re.escape(GEN_PREFIX) + r"([0-9]+)$")  # any width: 9 digits once hid a marker
_MAX_CLAIM_TRIES = 1000
# Markers this many generations below the newest are removed when a new one
# is claimed: only the newest matters to the fence; the rest is history.
KEEP_MARKERS = 16


class Fenced(RuntimeError):
    """This process's generation is older than one that has started since:
    it is a stale incarnation, and nothing it saves may become the job's
    latest checkpoint."""

    def __init__(self, directory, generation, newer, owner=None):
        owner = owner or {}
        path = directory.path if isinstance(directory, proto.Dir) else directory
        who = " (pod %s)" % owner["pod"] if isinstance(owner.get("pod"), str) else ""
        super().__init__("generation %d%s started in %s after this process's generation %d: this process is a stale "
                         "incarnation of the job (its pod was replaced, e.g. after its node was partitioned); its "
                         "checkpoints are refused and never resumed" % (newer, who, path, generation))
        self.generation, self.newer = generation, newer


def marker(generation):
    return "%s%08d" % (GEN_PREFIX, generation)


def _markers(d):
    """(generation, name, entry) of every entry named like a marker, whatever its type."""
    out = []
    try:
        entries = d.entries()
    except OSError:
        return out
    for e in entries:
        m = _GEN.match(e.name)
        if m:
            out.append((int(m.group(1)), e.name, e))
    return sorted(out, key=lambda t: t[0])


def generations(directory):
    """The generations taken in directory, ascending: any entry named like
    a marker counts, so a planted file can never make a claim retry forever."""
    with proto.opened(directory) as d:
        return [g for g, _, _ in _markers(d)]


def newest(directory):
    gens = generations(directory)
    return gens[-1] if gens else 0


def claim(directory, pod="", uid=""):
    """Take the next generation: mkdir of its marker is the atomic step.
    A number that is taken (another incarnation won it, or anything by that
    name is there) moves on to the next one."""
    with proto.opened(directory) as d:
        gen = newest(d) + 1
        for _ in range(_MAX_CLAIM_TRIES):
            if gen > MAX_GENERATION:
                raise RuntimeError("trainguard: %s holds a generation marker beyond the largest generation (%d): "
                                   "trainguard never writes one, someone wrote it on the volume; remove the "
                                   "trainguard-gen-* entries above it to train here" % (d.path, MAX_GENERATION))
            name = marker(gen)
            try:
                os.mkdir(name, 0o755, dir_fd=d.fd)
            except FileExistsError:
                gen += 1
                continue
            # Who holds it, for people and for the refusal message; the fence
            # itself only needs the directory.
            with d.sub(name) as m:
                m.write_json_atomic(OWNER_FILE, {"generation": gen, "pod": pod, "pod_uid": uid, "pid": os.getpid(),
                                                 "claimed_at": time.time()})
            d.fsync()
            _drop_old_markers(d, gen)
            return gen
    raise RuntimeError("trainguard: could not claim a generation in %s after %d tries" % (d.path, _MAX_CLAIM_TRIES))


def check(directory, generation):
    """Raise Fenced when a generation newer than ours has been claimed
    (anything by a newer marker's name counts: a writer of the volume could
    as well mkdir one)."""
    with proto.opened(directory) as d:
        markers = _markers(d)
        latest, name, _ = markers[-1] if markers else (0, None, None)
        if latest > generation:
            owner = None
            try:
                with d.sub(name) as m:
                    owner = m.read_json(OWNER_FILE)
            except OSError:
                pass
            raise Fenced(d, generation, latest, owner)


def _drop_old_markers(d, current):
    """Markers far below the generation just claimed: their holders are
    fenced by it. Only directories are removed (through the directory's
    descriptor); anything else named like a marker is not ours."""
    for gen, name, entry in _markers(d):
        if gen < current - KEEP_MARKERS and entry.is_dir(follow_symlinks=False):
            d.rmtree(name, ignore_errors=True)


def generation_of(commit, bound=None):
    """A commit's generation from its commit.json; 0 for commits written
    before fencing existed (they rank below every fenced commit). With
    bound (the newest marker on the volume), a generation above it is
    forged, since every real one was taken as a marker before its commit:
    it ranks as 0, so it neither outranks future commits nor escapes pruning."""
    gen = commit.get("generation", 0) if isinstance(commit, dict) else 0
    if not proto.is_count(gen):
        return 0
    return 0 if bound is not None and gen > bound else gen
