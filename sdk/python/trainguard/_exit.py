"""Leaving the training loop after a termination checkpoint.

The pod is stopping and its state is saved: every step taken now is lost.
A trainer that is its container's PID 1 never gets SIGTERM's default action
(the kernel drops signals PID 1 has no handler for), so without this it
trains on until SIGKILL ends the grace period. It must not leave too early
either: when PID 1 exits, the kernel kills every process of the pod's PID
namespace, the agent's preStop exec included, before it wrote the outcome.
So the trainer waits for the agent's done.json (written after the outcome),
bounded, then exits with 143 (128 + SIGTERM): never 0, which a Job's
podFailurePolicy would count as success. See docs/checkpoint-protocol.md.
"""

import contextlib
import logging
import os
import signal
import sys
import threading
import time

from . import _protocol as proto

log = logging.getLogger("trainguard")


def read_done(signal_dir, generation, nonce):
    """The agent's done.json for exactly this request, or None."""
    done = proto.read_json(os.path.join(signal_dir, proto.DONE_FILE))
    if done is None or done.get("generation") != generation or done.get("nonce", "") != (nonce or ""):
        return None
    return done


class SigtermFlag:
    """From the moment this process knows its pod is stopping until it
    exits, SIGTERM only sets a flag instead of killing it, so a trainer that
    is not PID 1 also leaves through the clean path (and the step it is in
    finishes). Only where SIGTERM still has its default action and only in
    the main thread (Python's rule): a handler of the user's own is left alone."""

    def __init__(self):
        self.received = False
        self._installed = False
        self._kept = False
        self._on_signal = None  # called once, from the handler, when kept

    def _on(self, signum, frame):
        self.received = True
        callback, self._on_signal = self._on_signal, None
        if callback is not None:
            callback()

    def install(self):
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on)
            self._installed = True

    def keep(self, on_signal=None):
        """Install for the rest of the process: restore() leaves the handler
        in place and only forgets a SIGTERM received (training goes on).
        on_signal is called once, from the handler, at the first SIGTERM.
        Says whether the handler is installed (not where the user has one)."""
        self.install()
        if self._installed:
            self._kept, self._on_signal = True, on_signal
        return self._installed

    @property
    def kept(self):
        return self._kept

    def restore(self):
        if self._kept:
            self.received = False
            return
        if self._installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self._installed = False


def wait_done(signal_dir, generation, nonce, wait, poll, on_tick=None, sigterm=None):
    """Wait up to `wait` seconds for done.json of this request, or SIGTERM
    (sigterm: an installed SigtermFlag). Returns (done or None, why): why is
    "done", "sigterm" or "timeout"."""
    until = time.monotonic() + wait
    while True:
        done = read_done(signal_dir, generation, nonce)
        if done is not None:
            return done, "done"
        if sigterm is not None and sigterm.received:
            return None, "sigterm"
        if time.monotonic() >= until:
            return None, "timeout"
        if on_tick is not None:
            on_tick()
        time.sleep(poll)


def start_watchdog(grace, code=proto.EXIT_CODE):
    """A daemon thread that ends the process with `code` if it still runs
    `grace` seconds after the exit began: a non-daemon thread of the user's
    or a hung atexit handler must not keep a stopping pod alive until
    SIGKILL. Daemon threads still run while the interpreter waits for
    non-daemon threads and runs atexit handlers."""
    def watch():
        time.sleep(grace)
        sys.stderr.write("trainguard: process still running %gs after the exit began; exiting %d now\n" % (grace, code))
        sys.stderr.flush()
        os._exit(code)

    threading.Thread(target=watch, name="trainguard-exit-watchdog", daemon=True).start()


def shutdown_distributed(dist):
    """Leave the process group so that peers see a closed connection at once
    rather than a timeout; a failure here must not stop the exit."""
    if dist is None:
        return
    try:
        dist.destroy_process_group()
    except Exception as e:  # already torn down, or a broken peer
        log.warning("trainguard: destroy_process_group: %s: %s", type(e).__name__, e)


def flush_output():
    for h in logging.getLogger().handlers + log.handlers:
        with contextlib.suppress(Exception):
            h.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


class Stopping:
    """This pod's termination, as every process of it sees it: the
    acknowledged termination request that ends training at the next step()
    boundary (wherever global rank 0 runs), the wait for the agent, and
    SIGTERM from torchrun's agent. requests: the _requests.Requests whose
    own_ack() tells this pod's acknowledged request."""

    def __init__(self, settings, state, requests):
        self._settings, self._state, self._requests = settings, state, requests
        self.sigterm = SigtermFlag()
        # (generation, nonce, checkpoint) of this pod's acknowledged
        # termination request: the step() boundary then ends training.
        self.termination = None
        self._ack_base = None  # (generation, nonce) of this pod's ack when listening began: that one is done

    def begin(self):
        """Listening begins: the ack in the signal dir now answers a request
        of an earlier process, not this one's termination."""
        self._ack_base = self._requests.own_ack()

    def defer_agent_sigterm(self):
        """Under torchrun, SIGTERM ends training at the step() boundary (or in
        the collective that fails first) instead of at once. torchrun's agent
        stops every local worker with SIGTERM within PET_MONITOR_INTERVAL of
        one dying (SIGKILL 30 s later): SIGTERM's default action killed
        rank 0 before its dying gasp whenever the agent was quicker than
        rank 0's failing collective, and the restarted workers lost every
        step since the last periodic checkpoint (e2e rank crash: 7 and 9).
        A watchdog bounds the deferral (TRAINGUARD_DUMP_TIMEOUT +
        TRAINGUARD_EXIT_GRACE; none where TRAINGUARD_EXIT_GRACE is 0): a
        trainer that never reaches a step() boundary still ends, and
        torchrun's SIGKILL bounds it anyway."""
        cfg = self._settings.config
        if not cfg.torchrun:
            return

        def watchdog():
            if cfg.exit_grace > 0:
                start_watchdog(cfg.dump_timeout + cfg.exit_grace)

        if self.sigterm.keep(watchdog):
            log.info("trainguard: rank %d under torchrun: SIGTERM from its agent ends training at the next step "
                     "boundary, after rank 0 commits the last completed step", cfg.rank)

    @property
    def sigterm_from_agent(self):
        return self.sigterm.received and self.sigterm.kept

    def end_on_sigterm(self, last_words):
        """SIGTERM under torchrun at a step() boundary: the agent stops this
        worker group (a local worker died, or torchrun itself is stopping).
        last_words() ends the listener and takes the dying gasp, as when a
        peer dies; the rank exits 143, as SIGTERM would have."""
        log.warning("trainguard: rank %d: SIGTERM from torchrun's agent; ending training after step %d (exit %d)",
                    self._settings.config.rank, self._state.step, proto.EXIT_CODE)
        last_words()
        flush_output()
        raise SystemExit(proto.EXIT_CODE)

    def watch_own_ack(self):
        """Every process learns that its pod's termination checkpoint was
        acknowledged, wherever global rank 0 runs (a worker pod's request is
        answered by rank 0 in another pod)."""
        if self._ack_base is not None and self.termination is None:
            gen, nonce = self._requests.own_ack()
            self.note(gen, nonce, "")

    def note(self, gen, nonce, name):
        """Rank 0 (which wrote the ack) and the listener (which reads it) may
        both see one ack: the first makes it the termination, once. An ack
        is one request's by (generation, nonce): at the largest generation
        a pod's next termination differs from its last by the nonce only."""
        if self._settings.config.after_checkpoint == "continue":
            return
        key = (gen, nonce)
        with self._requests.lock:
            base = self._ack_base or (0, "")
            if gen and key != base and gen >= base[0]:
                self._ack_base, self.termination = key, (gen, nonce, name)
            elif name and self.termination is not None and self.termination[:2] == key:
                self.termination = (gen, nonce, name)

    def terminate(self, answer, stop):
        """This pod is stopping and its checkpoint is acknowledged: hold the
        old way (TRAINGUARD_AFTER_CHECKPOINT=hold), or wait until the agent
        is done (bounded, TRAINGUARD_EXIT_WAIT; SIGTERM ends the wait too)
        and call stop(info), the termination hook or the exit. answer(name)
        answers another pod's request meanwhile with this checkpoint."""
        generation, nonce, name = self.termination
        self.termination = None
        cfg = self._settings.config
        if cfg.after_checkpoint == "hold":
            self._hold(name, answer)
            return
        self._state.phase = "holding"
        self.sigterm.install()
        log.info("trainguard: termination checkpoint %s acknowledged at step %d (generation %d); waiting up to %gs "
                 "for the agent to finish", name, self._state.step, generation, cfg.exit_wait)
        done, why = wait_done(cfg.signal_dir, generation, nonce, cfg.exit_wait,
                              min(cfg.poll_interval, 0.05), lambda: answer(name), self.sigterm)
        if why == "timeout":
            log.warning("trainguard: no %s from the agent within %gs; stopping anyway", proto.DONE_FILE, cfg.exit_wait)
        stop({"generation": generation, "step": self._state.step, "checkpoint": name,
              "outcome": (done or {}).get("outcome", ""), "why": why})  # exit() raises with the flag still set
        self.sigterm.restore()
        self._state.phase = "training"
        log.warning("trainguard: the termination hook returned; training goes on")

    def _hold(self, name, answer):
        """The pod is stopping: any step taken now would be lost, so wait here
        for SIGTERM. Bounded, in case nobody terminates us (a manual prestop)."""
        cfg = self._settings.config
        log.info("trainguard: checkpoint %s written for termination at step %d; holding training "
                 "(up to %gs) until the pod stops", name, self._state.step, cfg.hold_timeout)
        self._state.phase = "holding"
        until = time.monotonic() + cfg.hold_timeout
        while time.monotonic() < until:
            time.sleep(cfg.poll_interval)
            answer(name)
        self._state.phase = "training"
        log.warning("trainguard: still running %gs after a termination checkpoint; resuming training",
                    cfg.hold_timeout)
