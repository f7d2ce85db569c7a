"""The supervisor's fast start: it imports torch once and starts each trainer
by fork() of itself, the child running the user's program in process, so a
restarted trainer does not pay `import torch` again
(docs/checkpoint-protocol.md, "In-process recovery").

Only `python3 [-u] script.py args` and `python3 [-u] -m module args` with
the supervisor's own interpreter take this path; any other command, and any
failure before the user's code runs, starts the trainer as a new process.

The child is made to look to the user's program as a new interpreter would:
sys.argv, sys.orig_argv, sys.path[0], a fresh __main__, the interpreter's
signal dispositions, trainguard's own modules imported afresh, exit codes
(SystemExit, an uncaught exception, KeyboardInterrupt's SIGINT death),
atexit handlers and its /proc/<pid>/cmdline (the user's command).
"""

import ast
import builtins
import importlib.machinery
import os
import signal
import sys
import time
import traceback
import types

ENV_FORK = "TRAINGUARD_FORK"  # "0": start every trainer as a new process
PRELOAD = ("torch", "torch.distributed")
FAILED = 70  # the child's exit when the fast path failed before the user's code


class Plan:
    """How the user's command runs in process: kind "path" (a script) or
    "module" (-m), its target, the program's arguments."""

    def __init__(self, argv, exe, kind, target, args, unbuffered):
        self.argv, self.exe, self.kind, self.target, self.args, self.unbuffered = argv, exe, kind, target, args, unbuffered


def plan(argv, env):
    """(Plan, "") when argv can run in a fork of this interpreter, else (None, why)."""
    if env.get(ENV_FORK, "1") == "0":
        return None, "%s=0" % ENV_FORK
    if not hasattr(os, "fork") or not argv:
        return None, "no fork() here"
    exe = _which(argv[0], env.get("PATH", os.defpath))
    mine = os.path.abspath(sys.executable)
    # The same file in the same directory: a venv's python (another
    # directory) has other site-packages, so it runs as a new process.
    if not exe or os.path.dirname(exe) != os.path.dirname(mine) or os.path.realpath(exe) != os.path.realpath(mine):
        return None, "%s is not this interpreter (%s)" % (argv[0], mine)
    rest, unbuffered = argv[1:], False
    while rest[:1] == ["-u"]:
        rest, unbuffered = rest[1:], True
    if rest[:1] == ["-m"] and len(rest) > 1 and not rest[1].startswith("-"):
        return Plan(argv, exe, "module", rest[1], rest[2:], unbuffered), ""
    if rest and not rest[0].startswith("-") and rest[0].endswith(".py"):
        return Plan(argv, exe, "path", rest[0], rest[1:], unbuffered), ""
    return None, "the command is not python3 [-u] SCRIPT.py ... or python3 [-u] -m MODULE ..."


def _which(name, path):
    if os.sep in name:
        return os.path.abspath(name) if os.access(name, os.X_OK) else ""
    for d in path.split(os.pathsep):
        p = os.path.join(d or ".", name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return os.path.abspath(p)
    return ""


def preload(p):
    """Import torch and the torch modules the script imports at its top level
    (read, not run; one that fails to import is left to the script): the
    names imported."""
    for n in PRELOAD:
        __import__(n)
    names = list(PRELOAD)
    if p.kind == "path":
        try:
            with open(p.target, "rb") as f:
                tree = ast.parse(f.read())
            for node in tree.body:
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
                for m in mods:
                    if (m == "torch" or m.startswith("torch.")) and m not in names:
                        try:
                            __import__(m)
                            names.append(m)
                        except Exception:
                            pass
        except (OSError, SyntaxError, ValueError):
            pass  # the real interpreter reports it
    return names


def park_blas():
    """Stop OpenBLAS's worker threads, as OpenBLAS's own fork handler does
    just before a fork(): `import torch` starts them (one per core but
    one), and while they run this process cannot fork safely. A BLAS call
    starts them again, in whichever process makes it: the forked trainer
    gets its full pool; the supervisor makes none. The libraries' names:
    those found loaded."""
    parked = []
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return parked
    import ctypes
    for path in sorted(p for p in paths if "blas" in os.path.basename(p) and ".so" in os.path.basename(p)):
        try:
            stop = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY).blas_thread_shutdown_
        except (OSError, AttributeError):
            continue  # not OpenBLAS (the reference BLAS has no pool)
        stop()
        parked.append(os.path.basename(path))
    return parked


def unsafe():
    """Why this process must not fork now, or "": a fork keeps only the
    calling thread, so another thread's locks (torch's intra-op pools,
    OpenMP's) would stay held in the child for ever. OpenBLAS's pool is
    parked first (park_blas)."""
    park_blas()
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError as e:
        return "cannot count this process's threads (%s)" % e
    if threads != 1:
        return "%d threads run in the supervisor" % threads
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in the supervisor"
    return ""


def dispositions():
    """The signal dispositions a new interpreter starts with: this one's
    before the supervisor installs its own handlers."""
    out = {}
    for s in signal.valid_signals():
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            h = signal.getsignal(s)
        except (ValueError, OSError):
            continue
        if h is not None:
            out[s] = h
    return out


def _die_with_parent():
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass  # the life line's EOF ends it too


class Keeper:
    """A process of the supervisor's that hosts the job's store, so the
    supervisor itself stays single-threaded (the store's daemon threads
    live there) and can fork. It ends when the supervisor does: its life
    line (a pipe) reads EOF, or PR_SET_PDEATHSIG kills it."""

    def __init__(self, make):
        life_r, self.life = os.pipe()
        rep_r, rep_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(self.life)
                os.close(rep_r)
                _die_with_parent()
                for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
                    signal.signal(s, signal.SIG_IGN)  # the trainer's signals; the keeper outlives them
                try:
                    store = make()
                except BaseException as e:
                    os.write(rep_w, ("%s: %s" % (type(e).__name__, e)).encode())
                    os._exit(1)
                os.write(rep_w, b"ok")
                os.close(rep_w)
                _hold(store, life_r)
            finally:
                os._exit(0)
        os.close(life_r)
        os.close(rep_w)
        with os.fdopen(rep_r, "rb") as f:
            msg = f.read().decode(errors="replace")
        if msg != "ok":
            os.close(self.life)
            os.waitpid(self.pid, 0)
            raise RuntimeError(msg or "the store's process died")


def _hold(store, life):
    """Keep store (served by its own threads) until the life line reads EOF."""
    while os.read(life, 1):
        pass


class Forked:
    """A forked trainer, with the part of subprocess.Popen the supervisor uses."""

    def __init__(self, pid):
        self.pid, self.returncode = pid, None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self):
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # a signal handler's poll() reaped it
                if self.returncode is None:
                    self.returncode = 255
                break
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is None:
            os.kill(self.pid, sig)


class Started:
    """What the child reported before the user's code: ran (it runs it),
    generation (joined, or None), failed (why the fast path failed), nostore
    (why the store was unreachable)."""

    def __init__(self):
        self.ran, self.generation, self.failed, self.nostore = False, None, "", ""


def start(p, env, initial, close, join, blocked):
    """Fork the trainer: (Forked, Started). env: the trainer's environment;
    initial: dispositions(); close: the supervisor's descriptors the trainer
    must not hold; join: None, or a function of env that joins the store's
    next generation and returns the variables to add (raises NoStore);
    blocked: the signals the supervisor forwards, blocked across the fork
    and in the child until the user's code runs (then delivered to it)."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    rd, wr = os.pipe()
    began = time.monotonic()
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    pid = os.fork()
    if pid == 0:
        _child(p, env, initial, close + [rd], join, blocked, wr, began)  # ends in SystemExit
    os.close(wr)
    child = Forked(pid)
    st = Started()
    with os.fdopen(rd, "rb") as f:
        for line in f:
            word, _, rest = line.decode(errors="replace").rstrip("\n").partition(" ")
            if word == "gen":
                st.generation = int(rest)
            elif word == "nostore":
                st.nostore = rest
            elif word == "fail":
                st.failed = rest
            elif word == "run":
                st.ran = True
                break
    return child, st


class NoStore(Exception):
    """The job's store cannot be reached: the trainer runs without it."""


def _report(fd, text):
    os.write(fd, (text.replace("\n", " ") + "\n").encode())


def _child(p, env, initial, close, join, blocked, wr, began):
    gen = ""
    try:
        for fd in close:
            try:
                os.close(fd)
            except OSError:
                pass
        for s, h in initial.items():
            try:
                signal.signal(s, h)
            except (OSError, ValueError, RuntimeError):
                pass
        run = _prepare(p)
        if join is not None:
            try:
                extra = join(env)
            except NoStore as e:
                _report(wr, "nostore %s" % e)
            else:
                env = dict(env, **extra)
                gen = ", at generation %s" % extra.get("TORCHELASTIC_RESTART_COUNT", "0")
                _report(wr, "gen %s" % extra.get("TORCHELASTIC_RESTART_COUNT", "0"))
        _cmdline(p.argv)  # before os.environ changes the environment block it finds the arguments by
        os.environ.clear()
        os.environ.update(env)
        _fresh_modules()
        # Said here, not by the supervisor, so that it comes before the program's first line.
        os.write(2, ("trainguard supervise: forked the trainer (pid %d): its code runs %.2fs after the fork%s\n" % (
            os.getpid(), time.monotonic() - began, gen)).encode())
        _report(wr, "run")
        os.close(wr)
    except BaseException as e:
        try:
            _report(wr, "fail %s: %s" % (type(e).__name__, e))
        finally:
            os._exit(FAILED)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)  # a stop that came meanwhile acts now
    _run(run)


def _prepare(p):
    """Set sys and __main__ as the interpreter would for p; the function that
    runs the user's code. A script that cannot be read or compiled fails
    here, before any of it runs (the new process then reports it)."""
    main = types.ModuleType("__main__")
    main.__annotations__ = {}
    main.__builtins__ = builtins
    main.__loader__ = importlib.machinery.BuiltinImporter
    safe = getattr(sys.flags, "safe_path", False)
    if p.unbuffered:  # sys.flags does not say whether -u was given: done again
        _unbuffered()
    sys.orig_argv, sys.executable = list(p.argv), p.exe
    if p.kind == "module":
        sys.argv = ["-m"] + list(p.args)
        path0 = os.getcwd()
        import runpy

        def run():
            runpy._run_module_as_main(p.target, alter_argv=True)
    else:
        # As CPython 3.11: __file__ is the path joined to the working
        # directory, sys.path[0] the script's real directory.
        filename = p.target if os.path.isabs(p.target) else os.getcwd() + os.sep + p.target
        with open(filename, "rb") as f:
            source = f.read()
        code = compile(source, filename, "exec", dont_inherit=True)
        main.__file__, main.__cached__ = filename, None
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", filename)
        sys.argv = [p.target] + list(p.args)
        path0 = os.path.dirname(os.path.realpath(filename))

        def run():
            exec(code, main.__dict__)
    if not safe:
        sys.path[0:1] = [path0]
    sys.modules["__main__"] = main
    return run


def _unbuffered():
    import io
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        if old is None:
            continue
        old.flush()
        new = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=old.encoding, errors=old.errors,
                               write_through=True)
        setattr(sys, name, new)
        setattr(sys, "__%s__" % name, new)


def _fresh_modules():
    """The user's `import trainguard` runs the SDK's module code afresh, in
    the trainer's environment (its singleton reads it), not the
    supervisor's; numpy's global generator is seeded afresh as at its import
    (Python's random module reseeds itself after a fork)."""
    for name in [n for n in sys.modules if n == "trainguard" or n.startswith("trainguard.")]:
        del sys.modules[name]
    nprandom = sys.modules.get("numpy.random")
    if nprandom is not None:
        nprandom.seed()


def _cmdline(argv):
    """/proc/<pid>/cmdline shows the user's command, not the supervisor's
    (ps, and tools that find the trainer by its command line): the user's
    argv, whose arguments end the supervisor's (`... supervise -- python3
    ARGS`, `trainguard-python ARGS`), is written at the start of the
    process's argument area (just below its environment strings) and the
    rest zeroed. Nothing is written unless that memory holds exactly what
    /proc/self/cmdline shows."""
    try:
        import ctypes
        with open("/proc/self/cmdline", "rb") as f:
            have = f.read()
        want = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
        tail = b"".join(os.fsencode(a) + b"\0" for a in argv[1:])
        if len(want) > len(have) or not have.endswith(b"\0" + tail):
            return
        starts = []
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if len(fields) > 46:
            starts.append(int(fields[45]))  # arg_start (field 48)
        environ = ctypes.c_void_p.in_dll(ctypes.CDLL(None), "environ").value
        if environ:
            first = ctypes.cast(environ, ctypes.POINTER(ctypes.c_void_p))[0]
            if first:
                starts.append(first - len(have))  # the arguments end where the environment begins
        for start in starts:
            if start and ctypes.string_at(start, len(have)) == have:
                break
        else:
            return
        ctypes.memmove(start, want, len(want))
        ctypes.memset(start + len(want), 0, len(have) - len(want))
    except Exception:
        return  # cosmetic: ps shows the supervisor's command


def _stripped(tb):
    """tb from the user's code on: a new interpreter has no supervisor's
    frames above the program's (the -m form keeps runpy's, as it has them)."""
    out = tb
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == __file__:
            out = tb.tb_next
        tb = tb.tb_next
    return out


def _run(run):
    """Run the user's code; end this process as the interpreter ends it.
    SystemExit and KeyboardInterrupt go out through the supervisor's frames
    (none catches them, and they run nothing in a child) to the
    interpreter's own exit: its exit status and message, non-daemon threads
    joined, atexit handlers, modules torn down (files the program left
    open are flushed), streams flushed, SIGINT's death after an
    interrupt. Any other uncaught exception is printed as the interpreter
    prints it, then exit status 1."""
    try:
        run()
    except KeyboardInterrupt:
        hook = sys.excepthook
        sys.excepthook = lambda t, v, tb: hook(t, v.with_traceback(_stripped(tb)), _stripped(tb))
        raise
    except SystemExit:
        raise
    except BaseException:
        t, v, tb = sys.exc_info()
        tb = _stripped(tb)
        v.with_traceback(tb)  # the hook prints the exception's own traceback
        try:
            sys.excepthook(t, v, tb)
        except Exception:
            traceback.print_exception(t, v, tb)
        raise SystemExit(1) from None
    raise SystemExit(0)
