"""Files shared with trainguard-agent; docs/checkpoint-protocol.md is the spec."""

import contextlib
import errno
import json
import logging
import math
import os
import re
import socket
import stat
from dataclasses import dataclass

REQUEST_FILE = "request.json"
ACK_FILE = "ack.json"
HEARTBEAT_FILE = "heartbeat.json"
DONE_FILE = "done.json"  # the agent's preStop is over: the outcome is written
NOW_FILE = "checkpoint-now.json"  # a checkpoint-now request (_status.py): commit a step, train on
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
    dump_timeout: float = 5.0  # the dying gasp's bound (0: no gasp)
    torchrun: bool = False  # started by torchrun, whose agent SIGTERMs every worker once one died
    now_interval: float = 30.0  # at most one checkpoint-now request accepted per pod, and committed per job, per this

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
            dump_timeout=max(0.0, _duration_seconds(env.get("TRAINGUARD_DUMP_TIMEOUT"), 5.0)),
            torchrun=bool(env.get("TORCHELASTIC_RUN_ID")),
            now_interval=_now_interval(env.get("TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL")),
        )


class Settings:
    """The environment, read when first needed: the process-wide Migrator is
    made when trainguard is imported, before a trainer sets RANK and the like."""

    def __init__(self, env=None):
        self._env, self._config = env, None

    @property
    def env(self):
        return os.environ if self._env is None else self._env

    @property
    def config(self):
        if self._config is None:
            self._config = Config.from_env(self._env)
        return self._config


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


DEFAULT_NOW_INTERVAL = 30.0


def _now_interval(value):
    """Seconds between two checkpoint-now requests. Anyone on the pod
    network can send one, so no value turns the limit off: 0, a negative or
    an unreadable value is the default, with a warning."""
    if not value:
        return DEFAULT_NOW_INTERVAL
    seconds = _duration_seconds(value.strip(), None)
    if seconds is None or not seconds > 0:
        logging.getLogger("trainguard").warning(
            "trainguard: TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL=%r is not a positive duration; using %gs",
            value, DEFAULT_NOW_INTERVAL)
        return DEFAULT_NOW_INTERVAL
    return seconds


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


MAX_GENERATION = (1 << 53) - 1  # as the agent's maxGeneration: larger is forged (and not exact in every JSON reader)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def is_count(value, low=0, high=MAX_GENERATION):
    """An integer (never a bool) in [low, high]: a generation, sequence
    number or step as the protocol writes it."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


class Dir:
    """An open directory of the volume. Every file the SDK reads, writes,
    renames or removes there is named relative to one (dir_fd=), never by a
    path: a writer of the volume could otherwise swap a directory for a
    symlink between a check and its use (docs/checkpoint-protocol.md, "Safe
    loading"). Each directory is opened with O_NOFOLLOW|O_DIRECTORY, as the
    agent's dirFD is."""

    def __init__(self, fd, path):
        self.fd, self.path = fd, path

    @classmethod
    def open(cls, path):
        """Open path, refusing a symlink as its last component (the
        components above are the container's own layout)."""
        try:
            return cls(os.open(path, _DIR_FLAGS), path)
        except OSError as e:
            raise _refusal(e, path, os.path.islink(path)) from None

    def sub(self, name, create=False):
        """The child directory name, opened without following a symlink
        (created first when create is set)."""
        path = self.join(name)
        if create:
            try:
                os.mkdir(name, 0o755, dir_fd=self.fd)
            except FileExistsError:
                pass
        try:
            return Dir(os.open(name, _DIR_FLAGS, dir_fd=self.fd), path)
        except OSError as e:
            raise _refusal(e, path, self.is_symlink(name)) from None

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def join(self, name):
        return os.path.join(self.path, name)  # for messages only: never opened

    def lstat(self, name):
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def is_symlink(self, name):
        try:
            return stat.S_ISLNK(self.lstat(name).st_mode)
        except OSError:
            return False

    def entries(self):
        """The directory's entries (os.DirEntry; is_dir(follow_symlinks=False) is safe)."""
        with os.scandir(self.fd) as it:
            return list(it)

    def fsync(self):
        os.fsync(self.fd)

    def open_read(self, name):
        """A regular file for reading: never through a symlink, never
        blocking on a planted FIFO."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError("%s is not a regular file" % self.join(name))
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def read_json(self, name):
        """The parsed file, or None when it is missing or not a JSON object."""
        try:
            with self.open_read(name) as f:
                raw = f.read(MAX_PROTOCOL_FILE + 1)
            if len(raw) > MAX_PROTOCOL_FILE:
                return None
            obj = json.loads(raw.decode())
        except (OSError, ValueError, RecursionError, MemoryError):
            # A file nested deeper than the parser's stack (a few KB of "[") or
            # too big to hold is as unusable as a truncated one: never a crash.
            return None
        return obj if isinstance(obj, dict) else None

    def write_durable(self, name, write, mode=0o644):
        """Create name (which must not exist), write it and fsync it; returns its size."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), mode)  # the umask may have narrowed it; readers in other containers need it
            return os.fstat(f.fileno()).st_size

    def write_atomic(self, name, write):
        """Write via a temp file in this directory: write, fsync, rename, fsync the directory."""
        for _ in range(100):
            tmp = "." + name + ".tmp-" + os.urandom(6).hex()
            try:
                self.write_durable(tmp, write)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError("no free temp name for %s" % self.join(name))
        try:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.unlink_quietly(tmp)
            raise
        self.fsync()

    def write_json_atomic(self, name, obj):
        data = (json.dumps(obj, sort_keys=True) + "\n").encode()
        self.write_atomic(name, lambda f: f.write(data))

    def mkdtemp(self, prefix):
        """A new directory prefix + random suffix, mode 0700 until its owner opens it; returns its name."""
        for _ in range(100):
            name = prefix + os.urandom(6).hex()
            try:
                os.mkdir(name, 0o700, dir_fd=self.fd)
                return name
            except FileExistsError:
                continue
        raise FileExistsError("no free temp name %s* in %s" % (prefix, self.path))

    def rename(self, src, dst):
        os.rename(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink_quietly(self, name):
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass

    def rmtree(self, name, ignore_errors=False):
        """Remove name and everything below it, never following a symlink:
        a symlink is removed, not what it points to."""
        try:
            if not stat.S_ISDIR(self.lstat(name).st_mode):
                os.unlink(name, dir_fd=self.fd)
                return
            with self.sub(name) as d:
                for e in d.entries():
                    d.rmtree(e.name, ignore_errors)
            os.rmdir(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except OSError:
            if not ignore_errors:
                raise


def _refusal(err, path, is_link):
    """O_NOFOLLOW|O_DIRECTORY reports a symlink as ELOOP or ENOTDIR: say which."""
    if is_link or err.errno == errno.ELOOP:
        return OSError(errno.ELOOP, "%s is a symlink; refusing to follow it (remove it; trainguard creates the "
                                    "directory)" % path)
    if err.errno == errno.ENOTDIR:
        return OSError(errno.ENOTDIR, "%s is not a directory" % path)
    return err


@contextlib.contextmanager
def opened(directory):
    """directory as a Dir: an open one is used as is, a path is opened (and
    closed after)."""
    if isinstance(directory, Dir):
        yield directory
        return
    d = Dir.open(directory)
    try:
        yield d
    finally:
        d.close()


def write_json_atomic(path, obj):
    with opened(os.path.dirname(path) or ".") as d:
        d.write_json_atomic(os.path.basename(path), obj)


def read_json(path):
    """The parsed file, or None when it is missing or not a JSON object."""
    try:
        with opened(os.path.dirname(path) or ".") as d:
            return d.read_json(os.path.basename(path))
    except OSError:
        return None


def parse_request(req):
    """A request.json as the agent writes it, or ValueError saying what is
    wrong. Each pod's request is judged on its own: a malformed one must
    not stop rank 0 from reading the others
    (test_one_malformed_request_does_not_hide_the_others)."""
    if req is None:
        raise ValueError("missing, unreadable or not a JSON object")
    gen, nonce = req.get("generation"), req.get("nonce", "")
    if not is_count(gen, 1):
        raise ValueError("generation %r is not an integer in [1, %d]" % (gen, MAX_GENERATION))
    if not isinstance(nonce, str) or (nonce and not NONCE.match(nonce)):
        raise ValueError("malformed nonce")
    deadline = req.get("deadline", 0)
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not math.isfinite(deadline):
        raise ValueError("deadline %r is not a number of Unix seconds" % (deadline,))
    expired = req.get("expired", False)
    if not isinstance(expired, bool):
        raise ValueError("expired %r is not a boolean" % (expired,))
    uid = req.get("pod_uid", "")
    if not isinstance(uid, str) or len(uid) > 128:
        raise ValueError("pod_uid is not a pod's UID")
    return {"generation": gen, "nonce": nonce, "deadline": float(deadline), "expired": expired, "pod_uid": uid}


def for_other_incarnation(request, own_uid):
    """The (parsed) request names another pod of this pod's name: a zombie
    whose node came back from a partition runs its preStop into the signal
    dir its replacement shares. A request without a UID (an older agent) is
    everyone's, as before."""
    return bool(request["pod_uid"]) and bool(own_uid) and request["pod_uid"] != own_uid


def live(request, now):
    """The agent still waits for this (parsed) request."""
    return not request["expired"] and request["deadline"] >= now


MAX_REASON = 200  # characters of a checkpoint-now reason kept: a log line, not a document


def sanitize_reason(text):
    """A tenant's reason as printable ASCII, at most MAX_REASON characters:
    it is logged, never a path or a command."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:MAX_REASON])


def parse_now(req):
    """A checkpoint-now request as a status server writes it (NOW_FILE), or
    ValueError saying what is wrong. It is read from the volume: hostile."""
    if req is None:
        raise ValueError("unreadable or not a JSON object")
    nonce, step, at, reason = req.get("nonce"), req.get("step"), req.get("requested_at"), req.get("reason", "")
    if not isinstance(nonce, str) or not NONCE.match(nonce):
        raise ValueError("malformed nonce")
    if not is_count(step):
        raise ValueError("step %r is not an integer in [0, %d]" % (step, MAX_GENERATION))
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        raise ValueError("requested_at %r is not a number of Unix seconds" % (at,))
    if not isinstance(reason, str):
        raise ValueError("reason is not a string")
    return {"nonce": nonce, "step": step, "requested_at": float(at), "reason": sanitize_reason(reason)}
