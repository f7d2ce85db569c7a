"""The status port flooded, with a real trainer process and real sockets.

On a real cluster about 1,000 half-sent requests to port 9602 took one
descriptor and one thread each, for ever: the trainer ran out of file
descriptors (soft limit 1,024), and every periodic checkpoint, heartbeat
and the preStop checkpoint failed after that. Here a trainer with real
PyTorch runs with a soft limit of 256 descriptors, and 300 connections that
sent half a request stay open against its status port. The trainer must
keep committing periodic checkpoints, answer its pod's termination request
(the preStop hook's path: files in the signal dir, no port), keep its
heartbeat fresh and answer a whole status request, with its descriptors
bounded. Torch-dependent: fails without torch."""

import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, SDK)

from trainguard import _protocol as proto  # noqa: E402
from trainguard import _status as status  # noqa: E402
from trainguard import _storage as storage  # noqa: E402

FD_LIMIT = 256
FLOOD = 300  # more than FD_LIMIT: enough to exhaust it when each one keeps a descriptor
HALF_REQUEST = b"GET /trainguard/status HTTP/1.1\r\nHost: trainer\r\n"  # no blank line: never complete

TRAINER = textwrap.dedent("""
    import os, resource, sys, time
    # The trainer's own soft limit, as a container's: below the flood.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(os.environ["FD_LIMIT"]), hard))
    import logging
    import torch
    from trainguard import migrator
    from trainguard import _status
    # Whatever runs this test (a host-network CI pod, say), this trainer is on a pod network.
    _status.HOSTS_FILE = os.devnull

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    migrator.register("model", model)
    migrator.register("optimizer", opt)
    migrator.listening()
    print("listening", flush=True)
    while not os.path.exists(os.environ["STOP_FILE"]):
        with migrator.step():
            opt.zero_grad()
            model(torch.randn(8, 16)).pow(2).mean().backward()
            opt.step()
        time.sleep(0.02)
    print("periodic %r" % (migrator.periodic_stats,), flush=True)
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


class StatusPortFlood(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tg-flood-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.ckpt = os.path.join(self.dir, "ckpt")
        os.makedirs(self.ckpt)
        self.signal = os.path.join(self.ckpt, proto.SIGNAL_SUBDIR, "pod-0")
        self.stop = os.path.join(self.dir, "stop")
        self.port = free_port()
        script = os.path.join(self.dir, "train.py")
        with open(script, "w") as f:
            f.write(TRAINER)
        self.log = os.path.join(self.dir, "trainer.log")
        env = dict(os.environ, PYTHONPATH=SDK, OMP_NUM_THREADS="1", FD_LIMIT=str(FD_LIMIT), STOP_FILE=self.stop,
                   TRAINGUARD_CHECKPOINT_DIR=self.ckpt, TRAINGUARD_SIGNAL_DIR=self.signal,
                   TRAINGUARD_POD_NAME="pod-0", TRAINGUARD_AFTER_CHECKPOINT="continue",
                   TRAINGUARD_CHECKPOINT_EVERY_STEPS="10", TRAINGUARD_STATUS_PORT=str(self.port),
                   TRAINGUARD_STATUS_TIMEOUT="1s")
        with open(self.log, "w") as out:
            self.trainer = subprocess.Popen(["/usr/bin/python3", script], env=env, stdout=out,
                                            stderr=subprocess.STDOUT)
        self.addCleanup(self.trainer.kill)

    def output(self):
        with open(self.log) as f:
            return f.read()

    def wait(self, what, cond, limit):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            got = cond()
            if got:
                return got
            self.assertIsNone(self.trainer.poll(), "the trainer died:\n" + self.output())
            time.sleep(0.05)
        self.fail("%s: not within %.0f s\n%s" % (what, limit, self.output()))

    def committed_step(self):
        ptr = storage.read_pointer(self.ckpt)
        return ptr["step"] if ptr else None

    def get_status(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, status.PATH), timeout=3) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def flood(self):
        """FLOOD connections, each sending half a request once connected,
        all kept open. Returns (sockets, how many connected). They are
        opened a few at a time: http.server's accept queue held 5, and a
        connection the kernel could not queue waits a second or more for
        its SYN to be sent again, which would make the flood a trickle."""
        socks, sel = [], selectors.DefaultSelector()
        self.addCleanup(lambda: [s.close() for s in socks])
        connected = 0
        for first in range(0, FLOOD, 4):
            batch = []
            for _ in range(first, min(first + 4, FLOOD)):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", self.port))
                socks.append(s)
                batch.append(s)
                sel.register(s, selectors.EVENT_WRITE)
            end = time.monotonic() + 2
            while batch and time.monotonic() < end:
                for key, _ in sel.select(timeout=0.5):
                    s = key.fileobj
                    sel.unregister(s)
                    batch.remove(s)
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                        continue  # reset as it connected: turned away
                    connected += 1
                    try:
                        s.send(HALF_REQUEST)
                    except OSError:
                        pass  # turned away already
            for s in batch:
                sel.unregister(s)
            time.sleep(0.01)
        sel.close()
        return socks, connected

    def test_a_flood_of_half_sent_requests_starves_nothing(self):
        self.wait("the trainer listening", lambda: "listening" in self.output(), 120)
        self.wait("the status served", self.get_status, 30)
        self.wait("a first periodic checkpoint", self.committed_step, 30)
        time.sleep(1)
        baseline = max(open_fds(self.trainer.pid) for _ in range(20) if time.sleep(0.05) is None)

        fds, sampling = [], threading.Event()

        def sample():
            while not sampling.is_set():
                fds.append(open_fds(self.trainer.pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        self.addCleanup(sampling.set)
        started = time.monotonic()
        socks, connected = self.flood()
        flooded = time.monotonic() - started
        at_flood = self.committed_step()

        # The preStop hook's path: the agent's request in the signal dir, acknowledged.
        nonce = "0123456789abcdef0123456789abcdef"
        proto.write_json_atomic(os.path.join(self.signal, proto.REQUEST_FILE), {
            "generation": 1, "nonce": nonce, "pod": "pod-0", "requested_at": time.time(),
            "deadline": time.time() + 60, "agent_pid": os.getpid()})
        ack = self.wait("the termination request acknowledged",
                        lambda: proto.read_json(os.path.join(self.signal, proto.ACK_FILE)), 20)
        self.assertEqual(("ok", 1, nonce), (ack.get("status"), ack.get("generation"), ack.get("nonce")),
                         "%r\n%s" % (ack, self.output()))
        # Periodic checkpoints go on being committed.
        self.wait("a periodic checkpoint committed during the flood",
                  lambda: (self.committed_step() or 0) >= at_flood + 20, 20)
        # The heartbeat stays fresh.
        beat = proto.read_json(os.path.join(self.signal, proto.HEARTBEAT_FILE))
        self.assertLess(time.time() - beat["time"], 3, beat)
        # A whole status request is answered, once the few held connections reach their deadline.
        s = self.wait("a status request answered", self.get_status, 10)
        # At least the save before the last one seen on the volume (the
        # status learns of a commit just after its pointer is written).
        self.assertGreaterEqual(s["committed_step"], at_flood + 10, s)
        sampling.set()
        sampler.join()
        # The flood's sockets are still open on this side; the trainer holds few of them.
        self.assertEqual(FLOOD, sum(1 for x in socks if x.fileno() >= 0))
        peak = max(fds)
        self.assertLessEqual(peak, baseline + status.MAX_IN_FLIGHT + 8,
                             "descriptors: %d before the flood, %d at its peak" % (baseline, peak))

        open(self.stop, "w").close()
        self.assertEqual(0, self.trainer.wait(60), self.output())
        out = self.output()
        self.assertNotIn("periodic checkpoint failed", out)
        self.assertNotIn("Too many open files", out)
        print("flood: %d of %d connected in %.1fs; trainer descriptors %d before, %d at peak; "
              "committed step %d at the flood, %d after" % (connected, FLOOD, flooded, baseline, peak, at_flood,
                                                           s["committed_step"]), file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
