"""Checkpoints on the checkpoint volume: one immutable, sequence-numbered
directory per save, committed by renaming it into place after every file in
it (and its commit.json, written last) is fsynced, plus a pointer written
after it. A crash mid-save leaves only a temp directory nobody loads.

    trainguard-ckpt-00000007/
        state.json    step, job, saved_at and every non-tensor value (tagged JSON)
        tensors.pt    the tensors, torch.save'd as one list (absent when there are none)
        commit.json   {"format", "generation", "line", "files": {name: size}}: written last, checked on load

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

log = logging.getLogger("trainguard")

FORMAT_VERSION = 2
STATE_FILE = "state.json"
TENSOR_FILE = "tensors.pt"
COMMIT_FILE = "commit.json"
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's (zip) format; the only tensor format loaded
_NAME = re.compile(r"^" + re.escape(proto.CKPT_PREFIX) + r"([0-9]+)$")  # any width: 9 digits once hid a commit
_MAX_STATE_BYTES = 256 << 20  # a state.json beyond this is not ours


class CorruptCheckpoint(Exception):
    """A checkpoint that cannot be used (damaged, foreign or unsafe); the caller falls back."""


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
    tensors = []
    is_tensor = torch.is_tensor if torch is not None else (lambda _: False)
    state = {"format": FORMAT_VERSION, "step": payload["step"], "saved_at": payload["saved_at"],
             "world_size": payload["world_size"], "job": cfg.job, "generation": generation,
             "states": codec.encode(payload["states"], tensors, is_tensor)}
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
    files = {}
    if tensors:
        files[TENSOR_FILE] = t.write_durable(TENSOR_FILE, lambda f: torch.save(tensors, f))
    data = (json.dumps(state, sort_keys=True) + "\n").encode()
    files[STATE_FILE] = t.write_durable(STATE_FILE, lambda f: f.write(data))
    if test_delay > 0:  # test hook: widen the crash window before the commit
        time.sleep(test_delay)
    commit = {"format": FORMAT_VERSION, "generation": generation, "files": files}
    if line:  # none: the first line, as every commit from before resets existed
        commit["line"] = line
    t.write_durable(COMMIT_FILE, lambda f: f.write(json.dumps(commit).encode()))
    return sum(files.values())


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


def load_checkpoint(directory, name, job=""):
    """Load and validate one checkpoint; raises CorruptCheckpoint naming the file.
    `job` is this job's identity: a checkpoint recorded for another job is refused."""
    try:
        with proto.opened(directory) as d:
            path = d.join(name)
            if _seq_of(name) is None or not stat.S_ISDIR(d.lstat(name).st_mode):
                raise CorruptCheckpoint("%s is not a trainguard checkpoint directory" % path)
            with d.sub(name) as c:
                return _load(c, path, job)
    except OSError as e:
        raise CorruptCheckpoint("%s: %s" % (os.path.join(getattr(directory, "path", directory), name), e)) from e


def _load(c, path, job):
    commit = c.read_json(COMMIT_FILE)
    if commit is None or commit.get("format") != FORMAT_VERSION or not isinstance(commit.get("files"), dict):
        raise CorruptCheckpoint("%s has no valid %s: the save never finished" % (path, COMMIT_FILE))
    _check_sizes(c, commit["files"])
    state = _read_state(c, STATE_FILE)
    _check_job(path, state, job)
    tensors = _read_tensors(c, TENSOR_FILE, commit["files"][TENSOR_FILE]) \
        if TENSOR_FILE in commit["files"] else []
    try:
        states = codec.decode(state["states"], tensors)
    except (ValueError, TypeError, RecursionError, MemoryError) as e:
        raise CorruptCheckpoint("%s: %s: %s" % (c.join(STATE_FILE), type(e).__name__, e)) from e
    if not isinstance(states, dict):
        raise CorruptCheckpoint("%s: states is not a mapping" % c.join(STATE_FILE))
    return {"format": FORMAT_VERSION, "step": state["step"], "saved_at": state.get("saved_at"), "states": states}


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


def _check_sizes(c, files):
    for fname, size in files.items():
        if fname not in (STATE_FILE, TENSOR_FILE):
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
    if not (isinstance(state, dict) and state.get("format") == FORMAT_VERSION and "states" in state
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
        if len(data) != size:
            raise CorruptCheckpoint("%s changed while being loaded (%d bytes, commit says %d)" % (path, len(data), size))
        if data[:4] != _ZIP_MAGIC:
            raise CorruptCheckpoint("%s is not a torch zip file; refusing to unpickle it" % path)
        _refuse_torchscript(path, data, torch)
        return codec.load_tensors(torch, io.BytesIO(data))
    except CorruptCheckpoint:
        raise
    except codec.UnsafeCheckpoint as e:
        raise CorruptCheckpoint("%s: UNSAFE, not loaded: %s" % (path, e)) from e
    except Exception as e:  # truncated zip, unpickling garbage, I/O error: all mean "unusable"
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
