"""Checkpoints on the checkpoint volume: one immutable, sequence-numbered
directory per save, committed by renaming it into place after every file in
it (and its commit.json, written last) is fsynced, plus a pointer written
after it. A crash mid-save leaves only a temp directory nobody loads.

    trainguard-ckpt-00000007/
        state.json    step, job, saved_at and every non-tensor value (tagged JSON)
        tensors.pt    the tensors, torch.save'd as one list (absent when there are none)
        commit.json   {"format", "generation", "line", "files": {name: size}}: written last, checked on load

Sharded state (_shards.py) is saved by every rank: rank R adds its part as
shard-0000R.json and shard-0000R.pt, and commit.json (format 3) lists every
rank's files and "shards", the world size, which a load must match.

Each commit records the generation (_fence) of the incarnation that wrote it,
and its line when the generations were ever reset; loads and pruning rank
commits by (line, generation, sequence), so a commit of a stale incarnation
never outranks one of a newer incarnation.
"""

import errno
import importlib
import io
import json
import logging
import os
import re
import stat
import time
import zipfile

from . import _codec as codec
from . import _fence as fence
from . import _protocol as proto
from . import _wire as wire

log = logging.getLogger("trainguard")

FORMAT_VERSION = 2
SHARDED_FORMAT = 3  # a commit with every rank's part: an SDK that knows only 2 never loads half of it
_FORMATS = (FORMAT_VERSION, SHARDED_FORMAT)
_SHARD = re.compile(r"^shard-([0-9]{5})\.(json|pt)$")
STATE_FILE = "state.json"
TENSOR_FILE = "tensors.pt"
COMMIT_FILE = "commit.json"
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's (zip) format; the only tensor format loaded
_NAME = re.compile(r"^" + re.escape(proto.CKPT_PREFIX) + r"([0-9]+)$")  # any width: 9 digits once hid a commit
_MAX_STATE_BYTES = 256 << 20  # a state.json beyond this is not ours


class CorruptCheckpoint(Exception):
    """A checkpoint that cannot be used (damaged, foreign or unsafe); the caller falls back."""


class WorldSizeMismatch(RuntimeError):
    """A sharded checkpoint of another world size: never loaded in part, and
    no fallback to an older checkpoint either (that would lose steps in silence)."""

    def __init__(self, path, saved, now):
        super().__init__("trainguard: %s holds sharded state saved by %d ranks, and this job runs %d ranks: each "
                         "rank loads only its own part, so it resumes on %d ranks only. Run %d ranks to resume "
                         "from it, or move it out of the checkpoint directory to resume from an older one or "
                         "start fresh" % (path, saved, now, saved, saved))
        self.saved, self.now = saved, now

    @classmethod
    def relayed(cls, message):
        """Rank 0's refusal, as the other ranks raise it."""
        e = RuntimeError.__new__(cls)
        RuntimeError.__init__(e, message)
        e.saved = e.now = None
        return e


def shard_files(rank):
    """The state and tensor file names of rank's part."""
    return "shard-%05d.json" % rank, "shard-%05d.pt" % rank


def _torch():
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def use_torch(serializer):
    if serializer in ("pickle", "json"):  # "pickle" is the old name of the torch-free mode
        return None
    torch = _torch()
    if torch is None and serializer == "torch":
        raise RuntimeError("TRAINGUARD_SERIALIZER=torch but torch is not importable")
    return torch


def initialized_dist():
    """torch.distributed when the trainer initialised its process group, else None."""
    torch = _torch()
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def ckpt_name(seq):
    return "%s%08d" % (proto.CKPT_PREFIX, seq)


def _seq_of(name):
    m = _NAME.match(name)
    seq = int(m.group(1)) if m else None
    return seq if seq is not None and seq <= proto.MAX_GENERATION else None


def list_checkpoints(directory):
    """Committed checkpoint directories, newest first. Symlinks, temp
    directories and anything else are never listed, so never loaded or pruned."""
    names = []
    try:
        with proto.opened(directory) as d:
            entries = d.entries()
    except OSError:
        return []
    for e in entries:
        seq = _seq_of(e.name)
        if seq is not None and e.is_dir(follow_symlinks=False):
            names.append((seq, e.name))
    return [n for _, n in sorted(names, reverse=True)]


def read_pointer(directory):
    try:
        with proto.opened(directory) as d:
            ptr = d.read_json(proto.POINTER_FILE)
    except OSError:
        return None
    if ptr is None or not isinstance(ptr.get("file"), str):
        return None
    return ptr


def _commit_of(d, name):
    try:
        with d.sub(name) as c:
            return c.read_json(COMMIT_FILE)
    except OSError:
        return None


def ranked(directory, warn=False):
    """Committed checkpoints, best first: by the line their commit.json
    records (the current one, then the earlier ones, newest first), by
    generation, then by sequence number. A stale incarnation's commit can
    carry a higher sequence number than a newer incarnation's (it committed
    last), or, from before a reset, a higher generation; it still ranks
    below. In the current line a recorded generation above every marker on
    the volume is forged and ranks as 0 (fence.generation_of); an earlier
    line's markers are gone, so its commits keep their own order."""
    try:
        with proto.opened(directory) as d:
            bound = fence.newest(d)
            current, lines = fence.line_ranks(d)
            keyed = []
            for name in list_checkpoints(d):
                commit = _commit_of(d, name)
                line = fence.line_of(commit)
                if line is not None and line == current:
                    gen = fence.generation_of(commit, bound)
                    if warn and gen == 0 and fence.generation_of(commit) > bound:
                        log.warning("trainguard: %s records generation %d, above every generation marker in %s "
                                    "(%d): forged or copied from elsewhere; ranked as unfenced", d.join(name),
                                    fence.generation_of(commit), d.path, bound)
                else:
                    gen = fence.generation_of(commit)
                keyed.append((lines.get(line, 0), gen, _seq_of(name), name))
    except OSError:
        return []
    return [n for *_, n in sorted(keyed, reverse=True)]


def candidates(directory):
    """Names to try in order, best first (ranked). Deterministic, so ranks
    that resolve independently agree. The pointer is only checked: it is
    written after the commit it names, so a crash between the two, or a
    stale incarnation's commit, must not decide what is loaded."""
    ptr = read_pointer(directory)
    names = ranked(directory, warn=True)
    if ptr is not None and ptr["file"] not in names:
        log.warning("trainguard: %s points to %r, which is not a committed checkpoint in %s; trying the "
                    "committed ones", proto.POINTER_FILE, ptr["file"], getattr(directory, "path", directory))
    return names


def write_checkpoint(cfg, payload, generation=0, root=None, line=""):
    """Write payload {"step", "saved_at", "world_size", "states"} as the next
    checkpoint of this incarnation (`generation` of `line`; generation 0:
    unfenced) and move the pointer to it. Returns (name, bytes). On failure
    nothing visible changes. Raises fence.Fenced, before anything is written
    or removed, or before the commit, when a newer generation has started
    or the generations were reset, or after it (the commit then ranks below
    the newer generation's and the pointer is not moved). Pruning is left
    to prune(), after the ack. root: the checkpoint directory, already open."""
    with proto.opened(root or cfg.checkpoint_dir) as d:
        return _write_checkpoint(d, cfg, payload, generation, line)


def _write_checkpoint(d, cfg, payload, generation, line):
    if generation:
        # Before the temp directories are cleaned up: after a reset a stale
        # incarnation's generation may be above the new line's, whose save
        # in flight it would otherwise take for a dead one of its own.
        fence.check(d, generation, line)
    remove_temp_dirs(d, generation)
    torch = use_torch(cfg.serializer)
    state, tensors = _encoded(cfg, dict(payload, format=FORMAT_VERSION), payload["states"], generation, torch)
    tmp = d.mkdtemp("%sg%08d.tmp-" % ("." + proto.CKPT_PREFIX, generation))
    try:
        # Everything below goes through the descriptor opened here: a temp
        # directory swapped for a symlink afterwards is never written
        # through, and the chmod is the descriptor's (it once chmodded 0755
        # whatever the symlink pointed to).
        with d.sub(tmp) as t:
            size = _write_files(t, state, tensors, torch, cfg.test_save_delay, generation, line)
            os.fchmod(t.fd, 0o755)
            t.fsync()
            ident = _ident(os.fstat(t.fd))
        if generation:
            fence.check(d, generation, line)
        name, seq = _commit(d, tmp, ident)
    except BaseException as e:
        d.rmtree(tmp, ignore_errors=True)
        if generation and isinstance(e, OSError):
            # A newer incarnation cleans up older generations' temp
            # directories (a crashed save's, or a stale process's live one),
            # and a reset every one: name the real cause.
            fence.check(d, generation, line)
        raise
    d.fsync()
    if generation:
        # A newer incarnation may have claimed its generation while this
        # one committed: the commit stays (ranked below), the pointer does not move.
        fence.check(d, generation, line)
    d.write_json_atomic(proto.POINTER_FILE, {
        "file": name, "seq": seq, "step": payload["step"], "size": size, "job": cfg.job, "generation": generation,
        "saved_at": payload["saved_at"], "serializer": "torch" if tensors else "json",
    })
    return name, size


def _ident(st):
    return st.st_dev, st.st_ino


def _next_seq(d):
    ptr = read_pointer(d) or {}
    prev = ptr.get("seq") if proto.is_count(ptr.get("seq")) else 0
    return max([prev] + [_seq_of(n) for n in list_checkpoints(d)]) + 1


def _commit(d, tmp, ident):
    """Rename the finished temp directory to the next free sequence number.
    Renaming onto a committed (non-empty) directory fails on every POSIX
    filesystem, so two writers racing for one number cannot both win. The
    rename is by name: what landed must be the directory this save wrote
    (not a symlink swapped in for it), or the commit is undone."""
    for _ in range(100):
        seq = _next_seq(d)
        if seq > proto.MAX_GENERATION:
            raise OSError(errno.EOVERFLOW, "no checkpoint number left in %s: one at the largest number (%d) is "
                                           "there; trainguard never writes one, remove it" % (d.path, proto.MAX_GENERATION))
        name = ckpt_name(seq)
        try:
            d.rename(tmp, name)  # the commit
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            continue
        st = d.lstat(name)
        if not stat.S_ISDIR(st.st_mode) or _ident(st) != ident:
            d.unlink_quietly(name)
            raise OSError(errno.EINVAL, "%s was replaced while this save wrote it (%s): not committed" % (
                d.join(tmp), "a symlink" if stat.S_ISLNK(st.st_mode) else "another directory"))
        return name, seq
    raise OSError(errno.EEXIST, "no free checkpoint number in %s" % d.path)


def _write_files(t, state, tensors, torch, test_delay, generation, line):
    files = _write_state(t, state, tensors, torch, STATE_FILE, TENSOR_FILE)
    if test_delay > 0:  # test hook: widen the crash window before the commit
        time.sleep(test_delay)
    _write_commit(t, FORMAT_VERSION, generation, line, files)
    return sum(files.values())


def _write_state(t, state, tensors, torch, state_name, tensor_name):
    files = {}
    if tensors:
        files[tensor_name] = t.write_durable(tensor_name, lambda f: torch.save(tensors, f))
    data = (json.dumps(state, sort_keys=True) + "\n").encode()
    files[state_name] = t.write_durable(state_name, lambda f: f.write(data))
    return files


def _write_commit(t, fmt, generation, line, files, **extra):
    commit = dict(extra, format=fmt, generation=generation, files=files)
    if line:  # none: the first line, as every commit from before resets existed
        commit["line"] = line
    t.write_durable(COMMIT_FILE, lambda f: f.write(json.dumps(commit).encode()))


def _encoded(cfg, payload, states, generation, torch, **extra):
    """A state.json document (and its tensors) of states."""
    tensors = []
    is_tensor = torch.is_tensor if torch is not None else (lambda _: False)
    doc = dict(extra, format=payload.get("format", FORMAT_VERSION), step=payload["step"],
               saved_at=payload["saved_at"], world_size=payload["world_size"], job=cfg.job, generation=generation,
               states=codec.encode(states, tensors, is_tensor))
    return doc, tensors


# ------------------------------------------------------------ sharded


def _one(dist):
    return dist is None or dist.get_world_size() < 2


def _bcast(dist, value):
    if _one(dist):
        return value
    return wire.broadcast_json(dist, value, 0, "a sharded checkpoint's progress")


def _gather(dist, value):
    if _one(dist):
        return [value]
    return wire.gather_json(dist, value, "a sharded checkpoint's report")


def _faults(reports):
    """What keeps the parts the ranks reported (their gathered [files,
    why]) from being committed: a rank's own failure, or a report of files
    that are not its part (another rank's, the common state's) or sizes
    that are not sizes, which would put another size in commit.json."""
    faults = []
    for r, report in enumerate(reports):
        files, why = report if isinstance(report, (list, tuple)) and len(report) == 2 else (None, None)
        own = set(shard_files(r)) | ({STATE_FILE, TENSOR_FILE} if r == 0 else set())
        if why:
            faults.append(why if isinstance(why, str) else "rank %d: a failure that is not a message" % r)
        elif not (isinstance(files, dict) and set(files) <= own
                  and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in files.values())):
            faults.append("rank %d: reported files that are not its part (%s)" % (r, ", ".join(sorted(own))))
    return faults


def _why(e):
    return "" if e is None else "%s: %s" % (type(e).__name__, e)


def write_sharded_checkpoint(cfg, payload, part, generation=0, root=None, line="", dist=None):
    """A collective: every rank calls it at the same step with its part
    ({name: state} of its sharded objects); global rank 0 also writes
    payload (the rest of the state, as write_checkpoint). Rank 0 makes the
    temp directory (fenced), every rank writes its part into it, and rank 0
    commits it only once every rank reported its part written and fsynced;
    otherwise it removes it and every rank raises. Returns (name, bytes) on
    every rank. The checkpoint directory must be the same volume on every
    rank (it is: the job's claim)."""
    rank = 0 if _one(dist) else dist.get_rank()
    world = 1 if _one(dist) else dist.get_world_size()
    with proto.opened(root or cfg.checkpoint_dir) as d:
        return _write_sharded(d, cfg, payload, part, generation, line, dist, rank, world)


def _write_sharded(d, cfg, payload, part, generation, line, dist, rank, world):
    step = payload["step"]
    tmp, err = None, None
    if rank == 0:
        try:
            if generation:
                fence.check(d, generation, line)
            remove_temp_dirs(d, generation)
            tmp = d.mkdtemp("%sg%08d.tmp-" % ("." + proto.CKPT_PREFIX, generation))
        except Exception as e:
            err = e
    tmp_name, why = _bcast(dist, (tmp, _why(err)))
    if err is not None:
        raise err
    if not why and not (isinstance(tmp_name, str) and _TEMP.match(tmp_name) and "/" not in tmp_name):
        why = "no temp directory of a checkpoint: %r" % (tmp_name,)  # every part would go there
    if why:
        raise RuntimeError("trainguard: sharded checkpoint at step %d not started by rank 0: %s" % (step, why))
    files, err = {}, None
    torch = use_torch(cfg.serializer)
    try:
        with d.sub(tmp_name) as t:
            if rank == 0:
                doc, tensors = _encoded(cfg, dict(payload, format=SHARDED_FORMAT), payload["states"], generation,
                                        torch, sharded=sorted(part))
                files.update(_write_state(t, doc, tensors, torch, STATE_FILE, TENSOR_FILE))
            doc, tensors = _encoded(cfg, dict(payload, format=SHARDED_FORMAT), part, generation, torch, rank=rank)
            files.update(_write_state(t, doc, tensors, torch, *shard_files(rank)))
    except Exception as e:
        err = e
    reports = _gather(dist, (files, "rank %d: %s" % (rank, _why(err)) if err is not None else ""))
    failed = _faults(reports)
    name = size = None
    if not failed and rank == 0:
        try:
            name, size = _commit_sharded(d, cfg, payload, tmp_name, reports, generation, line, world)
        except Exception as e:
            err = e
            failed = ["rank 0: commit: " + _why(e)]
    elif failed and rank == 0:
        d.rmtree(tmp_name, ignore_errors=True)
    name, size, failed = _bcast(dist, (name, size, failed))
    if err is not None:
        raise err
    if failed:
        raise RuntimeError("trainguard: sharded checkpoint at step %d not committed: %s" % (step, "; ".join(failed)))
    return name, size


def _commit_sharded(d, cfg, payload, tmp, reports, generation, line, world):
    files = {}
    for part, _ in reports:
        files.update(part)
    try:
        with d.sub(tmp) as t:
            if cfg.test_save_delay > 0:  # test hook: widen the crash window before the commit
                time.sleep(cfg.test_save_delay)
            _write_commit(t, SHARDED_FORMAT, generation, line, files, shards=world)
            os.fchmod(t.fd, 0o755)
            t.fsync()
            ident = _ident(os.fstat(t.fd))
        if generation:
            fence.check(d, generation, line)
        name, seq = _commit(d, tmp, ident)
    except BaseException as e:
        d.rmtree(tmp, ignore_errors=True)
        if generation and isinstance(e, OSError):
            fence.check(d, generation, line)
        raise
    d.fsync()
    size = sum(files.values())
    if generation:
        fence.check(d, generation, line)
    d.write_json_atomic(proto.POINTER_FILE, {
        "file": name, "seq": seq, "step": payload["step"], "size": size, "job": cfg.job, "generation": generation,
        "saved_at": payload["saved_at"], "shards": world,
        "serializer": "torch" if any(f.endswith(".pt") for f in files) else "json",
    })
    return name, size


_TEMP = re.compile(r"^\." + re.escape(proto.CKPT_PREFIX) + r"(?:g([0-9]+)|[0-9]+)\.tmp-")


def remove_temp_dirs(directory, generation=0, every=False):
    """Temp directories left by a save that crashed. Only rank 0 writes, one
    save at a time, so a temp directory of this generation or an older one is
    dead; a newer generation's may be live (this process may be a stale
    incarnation) and is never touched. Names without a generation are 0.
    every: all of them (a reset, which fences every process that wrote one).
    Returns the names removed."""
    removed = []
    try:
        with proto.opened(directory) as d:
            for e in d.entries():
                m = _TEMP.match(e.name)
                if m is None or (not every and int(m.group(1) or 0) > generation):
                    continue
                d.rmtree(e.name, ignore_errors=True)
                removed.append(e.name)
    except OSError:
        pass
    return removed


def prune(directory, keep):
    """Keep the `keep` best committed checkpoints (ranked) and the pointer's."""
    with proto.opened(directory) as d:
        ptr = read_pointer(d) or {}
        for name in ranked(d)[keep:]:
            if name != ptr.get("file"):
                try:
                    d.rmtree(name)
                except OSError as e:
                    log.warning("trainguard: cannot remove old checkpoint %s: %s", name, e)


def load_checkpoint(directory, name, job="", rank=0, world=None):
    """Load and validate one checkpoint; raises CorruptCheckpoint naming the file.
    `job` is this job's identity: a checkpoint recorded for another job is refused.
    A sharded one gives rank's part with the rest; one of another world
    size than `world` (None: not checked) raises WorldSizeMismatch."""
    try:
        with proto.opened(directory) as d:
            path = d.join(name)
            if _seq_of(name) is None or not stat.S_ISDIR(d.lstat(name).st_mode):
                raise CorruptCheckpoint("%s is not a trainguard checkpoint directory" % path)
            with d.sub(name) as c:
                return _load(c, path, job, rank, world)
    except OSError as e:
        raise CorruptCheckpoint("%s: %s" % (os.path.join(getattr(directory, "path", directory), name), e)) from e


def _load(c, path, job, rank, world):
    commit = c.read_json(COMMIT_FILE)
    fmt = commit.get("format") if commit is not None else None
    if fmt not in _FORMATS or not isinstance(commit.get("files"), dict):
        raise CorruptCheckpoint("%s has no valid %s: the save never finished" % (path, COMMIT_FILE))
    shards = commit.get("shards") if fmt == SHARDED_FORMAT else None
    if fmt == SHARDED_FORMAT:
        if not proto.is_count(shards, 1, 1 << 20):
            raise CorruptCheckpoint("%s: %s records no world size (shards)" % (path, COMMIT_FILE))
        if world is not None and shards != world:
            raise WorldSizeMismatch(path, shards, world)
        if not proto.is_count(rank, 0, shards - 1) or shard_files(rank)[0] not in commit["files"]:
            raise CorruptCheckpoint("%s: no part of rank %r in %s" % (path, rank, COMMIT_FILE))
    _check_sizes(c, commit["files"], shards)
    state, states = _read_part(c, path, job, commit["files"], fmt, STATE_FILE, TENSOR_FILE)
    sharded = []
    if shards:
        part_state, part = _read_part(c, path, job, commit["files"], fmt, *shard_files(rank))
        sharded = state.get("sharded")
        if part_state.get("step") != state["step"] or part_state.get("rank") != rank \
                or not isinstance(sharded, list) or sorted(part) != sorted(sharded) or set(part) & set(states):
            raise CorruptCheckpoint("%s: the part of rank %d does not match %s" % (path, rank, STATE_FILE))
        states.update(part)
    return {"format": fmt, "step": state["step"], "saved_at": state.get("saved_at"), "states": states,
            "sharded": sharded, "shards": shards}


def _read_part(c, path, job, files, fmt, state_name, tensor_name):
    """(state document, decoded states) of one state file and its tensors."""
    if state_name not in files:
        raise CorruptCheckpoint("%s: %s does not list %s" % (path, COMMIT_FILE, state_name))
    state = _read_state(c, state_name)
    if state.get("format") != fmt:
        raise CorruptCheckpoint("%s: %s is of format %r, the commit of %r" % (path, state_name, state.get("format"), fmt))
    _check_job(path, state, job)
    tensors = _read_tensors(c, tensor_name, files[tensor_name]) if tensor_name in files else []
    try:
        states = codec.decode(state["states"], tensors)
    except (ValueError, TypeError, RecursionError, MemoryError) as e:
        raise CorruptCheckpoint("%s: %s: %s" % (c.join(state_name), type(e).__name__, e)) from e
    if not isinstance(states, dict):
        raise CorruptCheckpoint("%s: states is not a mapping" % c.join(state_name))
    return state, states


def _check_job(path, state, job):
    """Every checkpoint this format has ever written records its job ("" when
    the writer had no identity), so one without the field is not ours; and a
    checkpoint is loaded only by the job it records, never by "any job"."""
    recorded = state.get("job")
    if not isinstance(recorded, str):
        raise CorruptCheckpoint("%s records no job (state.json has no \"job\" string), so it cannot be "
                                "told apart from another job's; not loaded" % path)
    if recorded != job and recorded == proto.legacy_identity(job):
        log.warning("trainguard: %s was written for %r, this job's identity before the per-kind directory "
                    "prefix; loading it (it is in this job's own directory)", path, recorded)
        return
    if recorded != job:
        raise CorruptCheckpoint("%s belongs to job %r, not to this job (%r); to share checkpoints between "
                                "jobs give both the same trainguard.io/checkpoint-key" % (path, recorded, job))


def _check_sizes(c, files, shards=None):
    for fname, size in files.items():
        m = _SHARD.match(fname)
        if fname not in (STATE_FILE, TENSOR_FILE) and not (shards and m and int(m.group(1)) < shards):
            raise CorruptCheckpoint("%s: unexpected file %r in %s" % (c.path, fname, COMMIT_FILE))
        full = c.join(fname)
        try:
            st = c.lstat(fname)
        except OSError as e:
            raise CorruptCheckpoint("%s: %s" % (full, e)) from e
        if not _is_regular(st) or st.st_size != size:
            raise CorruptCheckpoint("%s: not the committed file (%d bytes, commit says %r)" % (full, st.st_size, size))


def _is_regular(st):
    return stat.S_ISREG(st.st_mode)


def _read_state(c, name):
    path = c.join(name)
    try:
        with c.open_read(name) as f:
            raw = f.read(_MAX_STATE_BYTES + 1)
        if len(raw) > _MAX_STATE_BYTES:
            raise ValueError("larger than %d bytes" % _MAX_STATE_BYTES)
        state = json.loads(raw.decode())
    except (OSError, ValueError, RecursionError, MemoryError) as e:  # deep nesting, huge arrays: corrupt
        raise CorruptCheckpoint("%s: %s: %s" % (path, type(e).__name__, e)) from e
    if not (isinstance(state, dict) and state.get("format") in _FORMATS and "states" in state
            and isinstance(state.get("step"), int) and not isinstance(state.get("step"), bool)):
        raise CorruptCheckpoint("%s is not a trainguard checkpoint state" % path)
    return state


def _read_tensors(c, name, size):
    path = c.join(name)
    torch = _torch()
    if torch is None:
        raise CorruptCheckpoint("%s holds tensors but torch is not importable" % path)
    try:
        # The whole file is read once and every check and torch.load see those
        # bytes: a writer of the volume cannot swap the file's content between
        # the TorchScript check and the load. Costs the file's size in memory
        # while loading.
        with c.open_read(name) as f:
            data = f.read(size + 1)  # size was checked against the file: more means it changed since
    except OSError as e:
        raise CorruptCheckpoint("%s: %s: %s" % (path, type(e).__name__, e)) from e
    if len(data) != size:
        raise CorruptCheckpoint("%s changed while being loaded (%d bytes, commit says %d)" % (path, len(data), size))
    return tensors_of(path, data, torch)


def tensors_of(path, data, torch):
    """The tensor list in data (what torch.save wrote), read without running
    code; path names it in the CorruptCheckpoint raised for anything else.
    A peer's state (_reform.py) is read here too."""
    try:
        if data[:4] != _ZIP_MAGIC:
            raise CorruptCheckpoint("%s is not a torch zip file; refusing to unpickle it" % path)
        _refuse_torchscript(path, data, torch)
        return codec.load_tensors(torch, io.BytesIO(data))
    except CorruptCheckpoint:
        raise
    except codec.UnsafeCheckpoint as e:
        raise CorruptCheckpoint("%s: UNSAFE, not loaded: %s" % (path, e)) from e
    except Exception as e:  # truncated zip, unpickling garbage: all mean "unusable"
        raise CorruptCheckpoint("%s: %s: %s" % (path, type(e).__name__, e)) from e


def _refuse_torchscript(path, data, torch):
    """torch <= 2.5 hands a zip holding constants.pkl to torch.jit.load before
    honouring weights_only (CVE-2025-32434), and loading TorchScript runs the
    archive's code (a scripted __setstate__). torch.save never writes
    constants.pkl or code/, so an archive with either is refused unread. The
    members are listed by Python's zipfile and by torch's own reader (the one
    torch.load decides with), so a zip the two parse differently is caught."""
    try:
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
        reader = getattr(getattr(torch, "_C", None), "PyTorchFileReader", None)
        if reader is not None:
            names += reader(io.BytesIO(data)).get_all_records()
    except (zipfile.BadZipFile, ValueError, OSError, RuntimeError) as e:
        raise CorruptCheckpoint("%s: not a readable zip: %s" % (path, e)) from e
    for member in names:
        parts = member.replace("\\", "/").split("/")
        if parts[-1] == "constants.pkl" or "code" in parts[:-1]:
            raise CorruptCheckpoint("%s: UNSAFE, not loaded: a TorchScript archive (member %r), which "
                                    "torch.load would run as code; trainguard writes only tensors"
                                    % (path, member))
