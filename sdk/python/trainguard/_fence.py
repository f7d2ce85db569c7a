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

Numbers end at MAX_GENERATION: a marker there (only a writer of the volume
puts one; a job claims one number per start) leaves no number to claim.
The way out is a reset (_reset.py, "Resetting the generations"), which
starts a new line of generations: a random name in LINE_FILE, which every
claim records and every check compares, so a process of an earlier line
is refused whatever its number, while the new line counts from 1 again.
"""

import os
import re
import time

from . import _protocol as proto

GEN_PREFIX = "trainguard-gen-"
OWNER_FILE = "owner.json"
LINE_FILE = "trainguard-line.json"  # the current line of generations; none: the first line, ""
KEEP_LINES = 16  # earlier lines remembered, newest first: their commits rank in that order
RESET_COMMAND = "python3 -m trainguard reset-generations"
_LINE = re.compile(r"[0-9a-f]{32}")  # fullmatch: "$" would admit a trailing newline
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
        if newer is None:  # the line is not the one this process claimed in
            super().__init__("the generations of %s were reset (%s names another line) after this process claimed "
                             "generation %d: this process is a stale incarnation of the job, of a line before the "
                             "reset; its checkpoints are refused and never resumed" % (path, LINE_FILE, generation))
        else:
            who = " (pod %s)" % owner["pod"] if isinstance(owner.get("pod"), str) else ""
            super().__init__("generation %d%s started in %s after this process's generation %d: this process is a "
                             "stale incarnation of the job (its pod was replaced, e.g. after its node was "
                             "partitioned); its checkpoints are refused and never resumed" % (newer, who, path,
                                                                                             generation))
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
    """Take the next generation of the current line; returns the number."""
    return claim_in_line(directory, pod, uid)[0]


def claim_in_line(directory, pod="", uid=""):
    """Take the next generation: mkdir of its marker is the atomic step.
    A number that is taken (another incarnation won it, or anything by that
    name is there) moves on to the next one. Returns (generation, line):
    the line is read before the marker is made, so a reset that removes the
    marker afterwards has written a newer line too (reset_generations)."""
    with proto.opened(directory) as d:
        current = read_line(d)
        if current is None:
            raise RuntimeError("trainguard: %s is not a line file trainguard wrote, so no incarnation can claim a "
                               "generation in %s. To train here again, stop the job and run `%s %s` "
                               "(docs/checkpoint-protocol.md, \"Resetting the generations\")"
                               % (d.join(LINE_FILE), d.path, RESET_COMMAND, d.path))
        line = current[0]
        gen = newest(d) + 1
        for _ in range(_MAX_CLAIM_TRIES):
            if gen > MAX_GENERATION:
                top = (_markers(d) or [(0, "?", None)])[-1][1]
                raise RuntimeError(
                    "trainguard: %s holds a generation marker at or beyond the largest generation (%d), %s: no "
                    "incarnation of the job can claim a generation after it, and a restart does not change that. "
                    "A job claims one generation per start and never gets there: someone wrote it on the volume. "
                    "To train here again, stop the job and run `%s %s` (docs/checkpoint-protocol.md, \"Resetting "
                    "the generations\"): it starts a new line of generations, which still fences every earlier "
                    "incarnation" % (d.path, MAX_GENERATION, top, RESET_COMMAND, d.path))
            name = marker(gen)
            try:
                os.mkdir(name, 0o755, dir_fd=d.fd)
            except FileExistsError:
                gen += 1
                continue
            # Who holds it, for people and for the refusal message; the fence
            # itself only needs the directory.
            with d.sub(name) as m:
                m.write_json_atomic(OWNER_FILE, {"generation": gen, "line": line, "pod": pod, "pod_uid": uid,
                                                 "pid": os.getpid(), "claimed_at": time.time()})
            d.fsync()
            _drop_old_markers(d, gen)
            return gen, line
    raise RuntimeError("trainguard: could not claim a generation in %s after %d tries" % (d.path, _MAX_CLAIM_TRIES))


def check(directory, generation, line=""):
    """Raise Fenced when a generation newer than ours has been claimed
    (anything by a newer marker's name counts: a writer of the volume could
    as well mkdir one), or when the generations were reset since our claim
    (the line is not ours any more)."""
    with proto.opened(directory) as d:
        # The markers first, then the line: a reset writes its new line
        # before it removes a marker, so a check that finds the markers
        # gone (no newer one) finds the new line too.
        markers = _markers(d)
        current = read_line(d)
        if current is None or current[0] != line:
            raise Fenced(d, generation, None)
        latest, name, _ = markers[-1] if markers else (0, None, None)
        if latest > generation:
            owner = None
            try:
                with d.sub(name) as m:
                    owner = m.read_json(OWNER_FILE)
            except OSError:
                pass
            raise Fenced(d, generation, latest, owner)


def read_line(d):
    """(line, earlier lines newest first) of an open directory: ("", []) when
    it has no line file (no reset yet: the first line), None when the file is
    not one trainguard wrote (claims are refused until a reset rewrites it)."""
    try:
        d.lstat(LINE_FILE)
    except FileNotFoundError:
        return "", []
    except OSError:
        return None
    obj = d.read_json(LINE_FILE)
    if obj is None:
        return None
    line, earlier = obj.get("line"), obj.get("previous", [])
    if not isinstance(line, str) or not _LINE.fullmatch(line) or not isinstance(earlier, list) \
            or len(earlier) > KEEP_LINES \
            or not all(isinstance(e, str) and (e == "" or _LINE.fullmatch(e)) for e in earlier):
        return None
    return line, earlier


def line_ranks(directory):
    """(current line, {line: rank}): the current line ranks highest, the
    earlier ones below it, newest first; a line not listed (or every line,
    when the file is not trainguard's) ranks 0."""
    with proto.opened(directory) as d:
        current = read_line(d)
    if current is None:
        return None, {}
    lines = [current[0]] + current[1]
    return current[0], {ln: len(lines) - i for i, ln in reversed(list(enumerate(lines)))}


def line_of(commit):
    """The line a commit.json records; "" (the first line) when it records none."""
    line = commit.get("line", "") if isinstance(commit, dict) else ""
    return line if isinstance(line, str) else None


def new_line(d, earlier, newest_before):
    """Write a new random line to LINE_FILE (atomically) and return it: from
    then on every check of a process that claimed in another line fails."""
    line = os.urandom(16).hex()
    d.write_json_atomic(LINE_FILE, {"line": line, "previous": earlier[:KEEP_LINES], "reset_at": time.time(),
                                    "newest_before": newest_before})
    return line


def remove_markers(d):
    """Remove every entry named like a marker, whatever it is (never
    following a symlink); returns their names."""
    names = [name for _, name, _ in _markers(d)]
    for name in names:
        d.rmtree(name)
    return names


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
