"""python3 -m trainguard supervise -- <command>: the container's process that
runs the trainer and outlives it (docs/checkpoint-protocol.md, "In-process
recovery").

- Global rank 0's supervisor hosts the job's rendezvous store at
  MASTER_PORT, so the store survives its trainer; the trainer joins it in
  torch's agent-store mode, at the generation the supervisor names. Under
  torchrun (the supervisor is torchrun's worker: PYTHON_EXEC, see
  python_exec in __main__.py) whose agent hosts the store already (its
  static rendezvous), every supervisor is a client of the agent's.
- For python3 SCRIPT.py / -m MODULE of its own interpreter it imports torch
  once and starts each trainer by fork() of itself (_fork.py): a restart
  does not import torch again. Otherwise, or when that fails before the
  user's code runs, the trainer is a new process, as before.
- A trainer killed by a signal (SIGKILL of the OOM killer, a segfault) or
  ended by an uncaught exception (exit 1, Python's code for it) is started
  again at once, at most TRAINGUARD_INPROCESS_RESTARTS times: no crash-loop
  back-off, the survivors never left, and global rank 0's store stays up.
  So is a trainer that exited 75 (_peer.EXIT_REJOIN: the SDK's "my group
  went on without me": rank 0's pod was replaced): it joins the job's next
  generation, and when it is not started again the supervisor exits 138
  for it.
  Any other exit code is the trainer's decision and is passed on at once
  (0, 138 of a survivor that gave up, 143 of a stop, a user's sys.exit(2)).
- Each restart counts toward the job's in-place cap: the webhook sets the
  budget to the cap (0 once the cap is reached), and the supervisor's exit
  appends "trainguard.io/inprocess-restarts <n>" to the container's
  termination message, which trainguard's rescheduler adds to the
  container's restart count.
- Everything else is the trainer's as before: SIGTERM, SIGINT and SIGHUP go
  to it, a trainer that was told to stop is never restarted, and the
  supervisor exits with the trainer's code (128 + signal for a signal).
"""

import logging
import os
import signal
import subprocess
import sys
import time

from . import _fork
from . import _peer as peer
from . import _reform as reform

log = logging.getLogger("trainguard")

ENV_RESTARTS = "TRAINGUARD_INPROCESS_RESTARTS"
DEFAULT_RESTARTS = 3
ENV_TERMINATION_LOG = "TRAINGUARD_TERMINATION_MESSAGE_PATH"  # the webhook's, the agent appends there too
RESTARTS_PREFIX = "trainguard.io/inprocess-restarts "  # Go: contract.InProcessRestartsPrefix
_FORWARD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXIT_EXCEPTION = 1  # Python's exit status for an uncaught exception


def restarts(env):
    text = env.get(ENV_RESTARTS, "")
    try:
        n = int(text) if text else DEFAULT_RESTARTS
    except ValueError:
        raise SystemExit("trainguard supervise: %s=%r: want a whole number of restarts (0: never)" %
                         (ENV_RESTARTS, text))
    return max(0, n)


def _say(fmt, *args):
    sys.stderr.write("trainguard supervise: " + (fmt % args) + "\n")
    sys.stderr.flush()


def _ranks(env):
    """(rank, world) when the job is distributed and names its store, else None."""
    try:
        rank, world = int(env.get("RANK", "")), int(env.get("WORLD_SIZE", ""))
        int(env.get("MASTER_PORT", ""))
    except ValueError:
        return None
    return (rank, world) if world > 1 else None


def run(argv, env=None):
    env = dict(os.environ if env is None else env)
    if not argv:
        _say("name the trainer's command: python3 -m trainguard supervise -- <command>")
        return 2
    cap = restarts(env)
    ranks = _ranks(env)
    start = _Start(argv, env, ranks)
    state = {"child": None, "stopping": False, "signal": 0}

    def forward(signum, _frame):
        if signum in _STOPPING:
            state["stopping"], state["signal"] = True, signum
        child = state["child"]
        if child is not None and child.poll() is None:
            state["sent"] = child
            child.send_signal(signum)

    for s in _FORWARD:
        signal.signal(s, forward)
    done = [0]
    me = os.getpid()
    try:
        return _supervise(start, cap, state, done)
    finally:
        if os.getpid() == me:  # a forked trainer's exit passes here too
            _report(env, done[0])


class _Start:
    """How the trainer starts: by fork() of this process, which imported
    torch once (_fork.py), or as a new process (the command is not
    python3 SCRIPT.py / -m MODULE of this interpreter, or the fast path
    failed once). Holds the job's store: a client of it (the new-process
    path joins generations here) or, for the fork path, nothing in this
    process: a forked trainer joins its generation itself, and global
    rank 0's store lives in a process of its own (_fork.Keeper), so that no
    thread of the store's runs here when it forks."""

    def __init__(self, argv, env, ranks):
        self.argv, self.env, self.ranks = argv, env, ranks
        self.initial = _fork.dispositions()  # before the supervisor's handlers
        self.plan, self.keeper, self.store, self.joins, self.generation = None, None, None, False, None
        self.hosts = False  # this supervisor hosts the job's store (set below)
        plan, why = _fork.plan(argv, env)
        if plan is not None:
            began = time.monotonic()
            try:
                names = _fork.preload(plan)
                why = _fork.unsafe()
            except Exception as e:
                why = "preloading torch failed: %s: %s" % (type(e).__name__, e)
            if why:
                _say("the trainer starts as a new process each time (%s): a restart imports torch again", why)
            else:
                self.plan = plan
                _say("imported %s in %.1fs: the trainer starts as a fork of this process, its imports done",
                     ", ".join(names), time.monotonic() - began)
        if ranks is None:
            return
        wait = max(reform.timeout(env), 60.0)
        self.hosts = ranks[0] == 0 and not agent_store(env)
        try:
            if self.plan is None:
                self.store = reform.connect(env, wait, master=self.hosts)
            elif self.hosts:
                self.keeper = _fork.Keeper(lambda: reform.connect(env, wait, master=True))
            self.joins = True
        except Exception as e:  # no store: the trainer hosts its own, as without the supervisor
            self._no_store("%s: %s" % (type(e).__name__, e))

    def _no_store(self, why):
        _say("no rendezvous store at port %s (%s): the trainer runs as without a supervisor",
             self.env.get("MASTER_PORT"), why)
        self.joins = False

    def launch(self, state):
        """Start the trainer: a Forked or a subprocess.Popen, or None (cannot start)."""
        if self.plan is not None:
            child = self._fork(state)
            if child is not None:
                return child
        child_env = dict(self.env)
        if self.joins:
            try:
                gen = self.generation if self.generation is not None else self._join()
                child_env.update(_supervised(gen))
            except Exception as e:
                self._no_store("%s: %s" % (type(e).__name__, e))
        self.generation = None
        try:
            return subprocess.Popen(self.argv, env=child_env, preexec_fn=self._ignored_as_before)
        except OSError as e:
            _say("cannot start %s: %s", self.argv[0], e)
            return None

    def _join(self):
        """The next generation, from this supervisor's client of the store
        (global rank 0's: the store it hosts). Any other next join connects
        afresh: by then MASTER_ADDR may name a new rank 0, and a client of
        the old one, its node partitioned, waited minutes for an answer."""
        if self.store is None:  # not hosting, or hosting after the fork path failed
            self.store = reform.connect(self.env, max(reform.timeout(self.env), 60.0))
        gen = reform.join_generation(self.store, self.ranks[0])
        if not self.hosts:
            self.store = None
        return gen

    def _ignored_as_before(self):
        """In the new process before its exec: a forwarded signal the
        supervisor's own parent ignored (nohup's SIGHUP) is ignored again,
        as the trainer would have found it without a supervisor and as the
        fork path restores it (exec resets only the handlers set here)."""
        for s in _FORWARD:
            if self.initial.get(s) == signal.SIG_IGN:
                signal.signal(s, signal.SIG_IGN)

    def _fork(self, state):
        close = [self.keeper.life] if self.keeper is not None else []
        join = _joiner(self.ranks[0]) if self.joins else None
        why = _fork.unsafe()
        if why:
            self.plan = None
            _say("the trainer starts as a new process from now on (%s)", why)
            return None
        try:
            child, st = _fork.start(self.plan, self.env, self.initial, close, join, _FORWARD)
        except Exception as e:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARD)
            st, child = _fork.Started(), None
            st.failed = "fork: %s: %s" % (type(e).__name__, e)
        if child is not None:
            state["child"] = child  # before the forwarded signals are unblocked
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARD)
        if st.nostore:
            self._no_store(st.nostore)
        if st.ran or not st.failed:  # ran, or died before its code (a signal): seen as the trainer's death
            return child
        if child is not None:
            child.wait()
        self.plan, self.generation = None, st.generation
        _say("the fork path failed before the trainer's code ran (%s): starting it as a new process, from now on",
             st.failed)
        return None


def agent_store(env):
    """Whether torchrun's agent hosts the job's store at MASTER_ADDR:MASTER_PORT
    (its static rendezvous says so to its workers): the supervisor of a
    worker torchrun started (PYTHON_EXEC) is then its client on every rank,
    and the store outlives every trainer and supervisor of the node."""
    return bool(env.get("TORCHELASTIC_RUN_ID")) and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def _supervised(gen):
    return {reform.ENV_SUPERVISED: "1", "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": str(gen)}


def _joiner(rank):
    """What a forked trainer runs before the user's code: join the store's
    next generation (the supervisor holds no client: its threads)."""
    def join(env):
        try:
            store = reform.connect(env, max(reform.timeout(env), 60.0))
        except Exception as e:
            raise _fork.NoStore("%s: %s" % (type(e).__name__, e))
        gen = reform.join_generation(store, rank)
        del store
        return _supervised(gen)
    return join


def _report(env, done):
    """The restarts made, where the rescheduler reads them (the container's
    termination message); nothing when there were none."""
    path = env.get(ENV_TERMINATION_LOG)
    if not done or not path:
        return
    try:
        with open(path, "a") as f:
            f.write("\n%s%d\n" % (RESTARTS_PREFIX, done))
    except OSError as e:
        _say("cannot report %d restarts in %s: %s", done, path, e)


def _supervise(start, cap, state, done):
    while True:
        started = time.monotonic()
        child = start.launch(state)
        if child is None:
            return 127
        signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARD)
        state["child"] = child
        if state["stopping"] and state.get("sent") is not child:  # told to stop while it was starting
            state["sent"] = child
            child.send_signal(state["signal"])
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARD)
        code = child.wait()
        _reap()
        if code >= 0 and code not in (EXIT_EXCEPTION, peer.EXIT_REJOIN):
            return code
        how, passed = _death(code)
        if state["stopping"] or done[0] >= cap:
            if not state["stopping"]:
                _say("the trainer (pid %d) %s after %.1fs; restarted %d times already (%s=%d): exiting %d",
                     child.pid, how, time.monotonic() - started, done[0], ENV_RESTARTS, cap, passed)
            return passed
        done[0] += 1
        _say("the trainer (pid %d) %s; starting it again (%d of %d, %s)", child.pid, how, done[0], cap,
             ENV_RESTARTS)


def _death(code):
    """How a restartable trainer ended, and the exit code that passes it on
    (128 + signal, as a shell reports a signal's death)."""
    if code == peer.EXIT_REJOIN:
        return "exited %d to rejoin its group at a new generation" % code, peer.EXIT_PEER_LOST
    if code >= 0:
        return "exited %d (an uncaught exception)" % code, code
    sig = -code
    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else "signal %d" % sig
    return "died of %s" % name, 128 + sig


def _reap():
    """As a container's PID 1 the supervisor inherits the trainer's orphans."""
    if os.getpid() != 1:
        return
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
