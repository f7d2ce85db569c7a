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
