"""Checkpoint files on the checkpoint volume: immutable, sequence-numbered
files plus a pointer written after them, so a crash mid-save never damages
the previous checkpoint."""

import glob
import importlib
import logging
import os
import pickle
import time

from . import _protocol as proto

log = logging.getLogger("trainguard")

FORMAT_VERSION = 1
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default (zip) format


class CorruptCheckpoint(Exception):
    """A checkpoint file that cannot be used; the caller falls back."""


def _torch():
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def use_torch(serializer):
    if serializer == "pickle":
        return None
    torch = _torch()
    if torch is None and serializer == "torch":
        raise RuntimeError("TRAINGUARD_SERIALIZER=torch but torch is not importable")
    return torch


def ckpt_name(seq):
    return "%s%08d%s" % (proto.CKPT_PREFIX, seq, proto.CKPT_SUFFIX)


def _seq_of(name):
    core = name[len(proto.CKPT_PREFIX):-len(proto.CKPT_SUFFIX)]
    return int(core) if core.isdigit() else None


def list_checkpoints(directory):
    """Complete checkpoint files, newest first (temp files are never listed)."""
    names = []
    for path in glob.glob(os.path.join(directory, proto.CKPT_PREFIX + "*" + proto.CKPT_SUFFIX)):
        name = os.path.basename(path)
        seq = _seq_of(name)
        if seq is not None:
            names.append((seq, name))
    return [n for _, n in sorted(names, reverse=True)]


def read_pointer(directory):
    ptr = proto.read_json(os.path.join(directory, proto.POINTER_FILE))
    if ptr is None or not isinstance(ptr.get("file"), str):
        return None
    return ptr


def candidates(directory):
    """Names to try in order: the pointer's file, then older complete files.
    Deterministic, so ranks that resolve independently agree."""
    ptr = read_pointer(directory)
    names = list_checkpoints(directory)
    if ptr is not None and ptr["file"] in names:
        names.remove(ptr["file"])
        names.insert(0, ptr["file"])
    elif ptr is not None:
        log.warning("trainguard: %s points to missing %s; trying older checkpoints",
                    proto.POINTER_FILE, ptr["file"])
    return names


def write_checkpoint(cfg, payload):
    """Write payload as the next checkpoint and move the pointer to it.
    Returns the file name. On failure nothing visible changes."""
    directory = cfg.checkpoint_dir
    _remove_temp_files(directory)
    ptr = read_pointer(directory) or {}
    existing = list_checkpoints(directory)
    seq = max([int(ptr.get("seq", 0))] + [_seq_of(n) for n in existing]) + 1
    name = ckpt_name(seq)
    torch = use_torch(cfg.serializer)

    def write(f):
        if torch is not None:
            torch.save(payload, f)
        else:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        if cfg.test_save_delay > 0:  # test hook: widen the crash window before the rename
            f.flush()
            time.sleep(cfg.test_save_delay)

    proto.write_atomic(os.path.join(directory, name), write)
    size = os.path.getsize(os.path.join(directory, name))
    proto.write_json_atomic(os.path.join(directory, proto.POINTER_FILE), {
        "file": name, "seq": seq, "step": payload["step"], "size": size,
        "saved_at": payload["saved_at"], "serializer": "torch" if torch is not None else "pickle",
    })
    _prune(directory, keep=cfg.keep)
    return name


def _remove_temp_files(directory):
    """Temp files left by a save that crashed; only rank 0 writes, so none is live."""
    for path in glob.glob(os.path.join(directory, "." + proto.CKPT_PREFIX + "*.tmp-*")):
        try:
            os.unlink(path)
        except OSError:
            pass


def _prune(directory, keep):
    ptr = read_pointer(directory) or {}
    for name in list_checkpoints(directory)[keep:]:
        if name != ptr.get("file"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError as e:
                log.warning("trainguard: cannot remove old checkpoint %s: %s", name, e)


def load_checkpoint(directory, name):
    """Load and validate one checkpoint file; raises CorruptCheckpoint."""
    path = os.path.join(directory, name)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
            f.seek(0)
            if magic == _ZIP_MAGIC:
                torch = _torch()
                if torch is None:
                    raise CorruptCheckpoint("%s was written with torch, which is not importable" % name)
                payload = torch.load(f, map_location="cpu")
            else:
                payload = pickle.load(f)
    except CorruptCheckpoint:
        raise
    except Exception as e:  # truncated zip, unpickling garbage, I/O error: all mean "unusable"
        raise CorruptCheckpoint("%s: %s: %s" % (name, type(e).__name__, e)) from e
    if not (isinstance(payload, dict) and payload.get("format") == FORMAT_VERSION
            and isinstance(payload.get("states"), dict) and isinstance(payload.get("step"), int)):
        raise CorruptCheckpoint("%s is not a trainguard checkpoint" % name)
    return payload
