"""python3 -m trainguard supervise -- <command>: the container's process that
runs the trainer and outlives it (docs/checkpoint-protocol.md, "In-process
recovery").

- Global rank 0's supervisor hosts the job's rendezvous store at
  MASTER_PORT, so the store survives its trainer; the trainer joins it in
  torch's agent-store mode, at the generation the supervisor names.
- A trainer killed by a signal (SIGKILL of the OOM killer, a segfault) is
  started again at once, at most TRAINGUARD_INPROCESS_RESTARTS times: no
  crash-loop back-off, and the survivors never left.
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

from . import _reform as reform

log = logging.getLogger("trainguard")

ENV_RESTARTS = "TRAINGUARD_INPROCESS_RESTARTS"
DEFAULT_RESTARTS = 3
ENV_TERMINATION_LOG = "TRAINGUARD_TERMINATION_MESSAGE_PATH"  # the webhook's, the agent appends there too
RESTARTS_PREFIX = "trainguard.io/inprocess-restarts "  # Go: contract.InProcessRestartsPrefix
_FORWARD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


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
    store = None
    if ranks is not None:
        wait = reform.timeout(env)
        try:
            store = reform.connect(env, max(wait, 60.0), master=ranks[0] == 0)
        except Exception as e:  # no store: the trainer hosts its own, as without the supervisor
            _say("no rendezvous store at port %s (%s: %s): the trainer runs as without a supervisor",
                 env.get("MASTER_PORT"), type(e).__name__, e)
    state = {"child": None, "stopping": False}

    def forward(signum, _frame):
        if signum in _STOPPING:
            state["stopping"] = True
        child = state["child"]
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for s in _FORWARD:
        signal.signal(s, forward)
    done = [0]
    try:
        return _supervise(argv, env, cap, ranks, store, state, done)
    finally:
        _report(env, done[0])


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


def _supervise(argv, env, cap, ranks, store, state, done):
    while True:
        child_env = dict(env)
        if store is not None:
            gen = reform.join_generation(store, ranks[0])
            child_env.update({reform.ENV_SUPERVISED: "1", "TORCHELASTIC_USE_AGENT_STORE": "True",
                              "TORCHELASTIC_RESTART_COUNT": str(gen)})
        started = time.monotonic()
        try:
            child = subprocess.Popen(argv, env=child_env)
        except OSError as e:
            _say("cannot start %s: %s", argv[0], e)
            return 127
        state["child"] = child
        code = child.wait()
        _reap()
        if code >= 0:
            return code
        sig = -code
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else "signal %d" % sig
        if state["stopping"] or done[0] >= cap:
            if not state["stopping"]:
                _say("the trainer (pid %d) died of %s after %.1fs; restarted %d times already (%s=%d): exiting %d",
                     child.pid, name, time.monotonic() - started, done[0], ENV_RESTARTS, cap, 128 + sig)
            return 128 + sig
        done[0] += 1
        _say("the trainer (pid %d) died of %s; starting it again (%d of %d, %s)", child.pid, name, done[0], cap,
             ENV_RESTARTS)


def _reap():
    """As a container's PID 1 the supervisor inherits the trainer's orphans."""
    if os.getpid() != 1:
        return
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
