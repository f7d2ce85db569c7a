"""Files shared with trainguard-agent; docs/checkpoint-protocol.md is the spec."""

import json
import logging
import os
import re
import socket
import stat
import tempfile
from dataclasses import dataclass

REQUEST_FILE = "request.json"
ACK_FILE = "ack.json"
HEARTBEAT_FILE = "heartbeat.json"
DONE_FILE = "done.json"  # the agent's preStop is over: the outcome is written
EXIT_CODE = 143  # 128 + SIGTERM: a Job's podFailurePolicy must not count a stopped pod as a success
POINTER_FILE = "trainguard-latest.json"
CKPT_PREFIX = "trainguard-ckpt-"
CKPT_SUFFIX = ".pt"
SIGNAL_SUBDIR = ".trainguard"
MAX_PROTOCOL_FILE = 64 << 10  # request, ack, heartbeat and pointer are tiny; anything bigger is not ours
NONCE = re.compile(r"^[0-9a-f]{32}$")


def _duration_seconds(text, default):
    """Parse the Go durations the webhook injects (60s, 1m30s, 500ms)."""
    if not text:
        return default
    units = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    total, num = 0.0, ""
    i = 0
    try:
        while i < len(text):
            c = text[i]
            if c.isdigit() or c == ".":
                num += c
                i += 1
                continue
            unit = text[i:i + 2] if text[i:i + 2] == "ms" else c
            total += float(num) * units[unit]
            num = ""
            i += len(unit)
        if num:
            total += float(num)
        return total
    except (KeyError, ValueError):
        return default


@dataclass(frozen=True)
class Config:
    """Everything the SDK reads from the environment, read once per Migrator."""

    checkpoint_dir: str
    signal_dir: str
    pod: str
    rank: int
    world_size: int
    local_rank: int
    prestop_timeout: float
    after_checkpoint: str  # "exit" (default), "hold" or "continue"
    hold_timeout: float
    keep: int
    heartbeat_interval: float
    poll_interval: float
    serializer: str  # "auto", "torch" or "json" (torch-free; "pickle" is its old name)
    test_save_delay: float  # test hook: seconds to stall a save before its rename
    job: str  # "<namespace>/<checkpoint key>" as the webhook derived it; "" when unknown
    pod_uid: str = ""  # recorded with the fence generation, for people reading it
    every_steps: int = 0  # periodic background checkpoint every N steps (0: off)
    every_seconds: float = 0.0  # ... or every so many seconds of training (0: off)
    exit_wait: float = 60.0  # after a termination ack, how long to wait for the agent's done.json
    exit_grace: float = 10.0  # after the exit began, os._exit if the interpreter has not ended by then (0: never)

    @classmethod
    def from_env(cls, env=None):
        env = os.environ if env is None else env
        ckpt = env.get("TRAINGUARD_CHECKPOINT_DIR") or env.get("MIGRATION_CKPT_PATH") or "/checkpoint"
        pod = env.get("TRAINGUARD_POD_NAME") or env.get("HOSTNAME") or socket.gethostname()
        signal = (env.get("TRAINGUARD_SIGNAL_DIR") or env.get("MIGRATION_SIGNAL_PATH")
                  or os.path.join(ckpt, SIGNAL_SUBDIR, pod))
        prestop = _duration_seconds(env.get("TRAINGUARD_PRESTOP_TIMEOUT"), 60.0)
        return cls(
            checkpoint_dir=ckpt,
            signal_dir=signal,
            pod=pod,
            rank=int(env.get("RANK", "0")),
            world_size=int(env.get("WORLD_SIZE", "1")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            prestop_timeout=prestop,
            after_checkpoint=_after_checkpoint(env.get("TRAINGUARD_AFTER_CHECKPOINT")),
            hold_timeout=_duration_seconds(env.get("TRAINGUARD_HOLD_TIMEOUT"), max(2 * prestop, 60.0)),
            keep=max(2, int(env.get("TRAINGUARD_KEEP_CHECKPOINTS", "2"))),
            heartbeat_interval=0.5,
            poll_interval=0.1,
            serializer=env.get("TRAINGUARD_SERIALIZER", "auto"),
            test_save_delay=float(env.get("TRAINGUARD_TEST_SAVE_DELAY", "0") or 0),
            job=job_identity(env),
            pod_uid=env.get("TRAINGUARD_POD_UID", ""),
            every_steps=max(0, int(env.get("TRAINGUARD_CHECKPOINT_EVERY_STEPS", "0") or 0)),
            every_seconds=max(0.0, _duration_seconds(env.get("TRAINGUARD_CHECKPOINT_EVERY"), 0.0)),
            # The agent's whole hook, request to done.json, fits in its timeout.
            exit_wait=max(0.0, _duration_seconds(env.get("TRAINGUARD_EXIT_WAIT"), prestop)),
            exit_grace=max(0.0, _duration_seconds(env.get("TRAINGUARD_EXIT_GRACE"), 10.0)),
        )


AFTER_CHECKPOINT = ("exit", "hold", "continue")


def _after_checkpoint(value):
    """What the trainer does after a termination checkpoint. An unknown value
    is the default (exit), with a warning: a typo must not keep a stopping
    pod training until SIGKILL."""
    if not value:
        return "exit"
    if value not in AFTER_CHECKPOINT:
        logging.getLogger("trainguard").warning(
            "trainguard: TRAINGUARD_AFTER_CHECKPOINT=%r is not one of %s; using exit", value, "|".join(AFTER_CHECKPOINT))
        return "exit"
    return value


def job_identity(env):
    """The job a checkpoint belongs to, recorded in it and checked on load, so
    a checkpoint of another job that reaches this directory is never resumed."""
    ns, key = env.get("TRAINGUARD_NAMESPACE", ""), env.get("TRAINGUARD_CHECKPOINT_KEY", "")
    key = "/".join(part for part in key.split("/") if part)
    return "%s/%s" % (ns, key) if ns and key else ""


# A job template's key starts with its kind qualified by its group. Before
# that, kubeflow and KubeDL PyTorchJobs both used "pytorchjob/<name>", so two
# jobs of the same name shared a directory and an identity.
TEMPLATE_PREFIXES = ("pytorchjob.kubeflow.org", "pytorchjob.training.kubedl.io")
LEGACY_TEMPLATE_PREFIX = "pytorchjob"


def legacy_identity(job):
    """The identity this job had under the old shared prefix, or None. A
    checkpoint recording it is one the user moved into this job's own
    directory (docs/checkpoint-protocol.md, "Upgrading")."""
    ns, _, key = job.partition("/")
    first, _, rest = key.partition("/")
    if ns and first in TEMPLATE_PREFIXES and rest:
        return "%s/%s/%s" % (ns, LEGACY_TEMPLATE_PREFIX, rest)
    return None


def names_no_job(job):
    """A key that is only its literal prefix: the pod carries none of the
    labels that name its job, so every such pod shares the directory."""
    ns, _, key = job.partition("/")
    return bool(ns and key) and "/" not in key


def fsync_dir(path):
    """Make a rename durable: the new directory entry survives a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path, write):
    """Create path (which must not exist), write it and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def open_nofollow(path):
    """Open a regular file for reading without following a symlink or
    blocking on a planted FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("%s is not a regular file" % path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def write_atomic(path, write):
    """Write via a temp file in the same dir: write, fsync, rename, fsync dir."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def write_json_atomic(path, obj):
    data = (json.dumps(obj, sort_keys=True) + "\n").encode()
    write_atomic(path, lambda f: f.write(data))


def read_json(path):
    """The parsed file, or None when it is missing or not a JSON object."""
    try:
        with open_nofollow(path) as f:
            raw = f.read(MAX_PROTOCOL_FILE + 1)
        if len(raw) > MAX_PROTOCOL_FILE:
            return None
        obj = json.loads(raw.decode())
    except (OSError, ValueError, RecursionError, MemoryError):
        # A file nested deeper than the parser's stack (a few KB of "[") or
        # too big to hold is as unusable as a truncated one: never a crash.
        return None
    return obj if isinstance(obj, dict) else None
